"""A job's history in the job store: its final state, kept after the objects that ran it.

A local job's folder (``$KTRAIN_HOME/jobs/NAME``, :mod:`.jobstore`) is its history already: it
is there until ``%ktrain delete``. A cluster job's objects are not ours to keep (``--ttl``,
``%ktrain delete``, the operator's clean-up remove them), so when any process sees it ended
(the kernel's follow, ``%ktrain status``, the panel's server), its final
:class:`~.base.JobStatus` and shape are written, the same way a local job's ``state.json`` is
(:func:`.jobstore.write_state`: atomic, locked), to::

    $KTRAIN_HOME/history/BACKEND/NAME/state.json   {"status": ..., "shape": ..., "uid", ...}

beside the job's record (``run.json``, :mod:`..tracking.store`) and its pods' lines
(``logs/UID/POD.log``, :class:`.kubernetes.logs.FollowedLines`). The logs are size-bounded:
each pod's file keeps its newest 16 MiB or so, and all kept logs of a backend together at most
:data:`LOGS_BOUND` bytes (the oldest jobs' logs are removed first; their state and record,
a few KiB, stay). ``%ktrain delete NAME --history`` removes a job's history.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ..jobs import Eviction, JobShape, JobState, JobStatus, ReplicaStatus
from ..pod.progress import Progress
from .jobstore import make_private_dirs, read_state, write_state

__all__ = [
    "LOGS_BOUND",
    "KeptJob",
    "forget_state",
    "keep",
    "kept",
    "kept_names",
    "prune_logs",
    "status_from_json",
    "status_to_json",
]

LOGS_BOUND = int(os.environ.get("KTRAIN_HISTORY_BYTES") or 1 << 30)  # 1 GiB per backend
_LOCK = ".state.lock"


def _folder(backend: str, name: str) -> Path:
    from ..tracking.store import job_dir

    return job_dir(backend, name)


def status_to_json(status: JobStatus) -> dict[str, Any]:
    """A :class:`JobStatus` as JSON (a warm job's live run book is not kept)."""
    return {
        "name": status.name,
        "state": str(status.state),
        "reason": status.reason,
        "message": status.message,
        "exit_codes": {str(k): v for k, v in status.exit_codes.items()},
        "replicas": [asdict(r) for r in status.replicas],
        "started": status.started,
        "finished": status.finished,
        "failed_rank": status.failed_rank,
        "progress": status.progress.to_dict() if status.progress else None,
        "max_restarts": status.max_restarts,
        "evictions": [asdict(e) for e in status.evictions],
        "admitted_by": status.admitted_by,
        "dashboard": status.dashboard,
    }


def status_from_json(raw: dict[str, Any]) -> JobStatus:
    """Inverse of :func:`status_to_json` (unknown keys ignored: an older or newer store)."""
    return JobStatus(
        name=str(raw["name"]),
        state=JobState(raw["state"]),
        reason=str(raw.get("reason") or ""),
        message=str(raw.get("message") or ""),
        exit_codes={int(k): int(v) for k, v in (raw.get("exit_codes") or {}).items()},
        replicas=tuple(ReplicaStatus(**r) for r in raw.get("replicas") or ()),
        started=raw.get("started"),
        finished=raw.get("finished"),
        failed_rank=raw.get("failed_rank"),
        progress=Progress.from_dict(raw.get("progress")),
        max_restarts=raw.get("max_restarts"),
        evictions=tuple(Eviction(**e) for e in raw.get("evictions") or ()),
        admitted_by=str(raw.get("admitted_by") or ""),
        dashboard=str(raw.get("dashboard") or ""),
    )


@dataclass(frozen=True)
class KeptJob:
    """A job's history: its last status (``from_history`` set), its shape, the id of the
    objects it was (a new job of the name is another), where it ran, and its folder."""

    status: JobStatus
    shape: JobShape | None
    uid: str
    namespace: str
    folder: Path
    kept_at: float


def keep(
    backend: str, status: JobStatus, shape: JobShape | None, uid: str = "", namespace: str = ""
) -> Path:
    """Write the job's final state to its history (replacing what an earlier job of the
    name left); the folder."""
    folder = _folder(backend, status.name)
    make_private_dirs(folder)
    raw = {
        "status": status_to_json(status),
        "shape": asdict(shape) if shape is not None else None,
        "uid": uid,
        "namespace": namespace,
        "kept_at": time.time(),
    }
    write_state(folder, raw)
    return folder


def kept(backend: str, name: str) -> KeptJob | None:
    """The job's history; None when none was kept (or it cannot be read)."""
    folder = _folder(backend, name)
    raw = read_state(folder)
    if not raw or not isinstance(raw.get("status"), dict):
        return None
    try:
        status = replace(status_from_json(raw["status"]), from_history=True)
        shape = JobShape(**raw["shape"]) if isinstance(raw.get("shape"), dict) else None
    except (KeyError, TypeError, ValueError):
        return None
    return KeptJob(
        status,
        shape,
        str(raw.get("uid") or ""),
        str(raw.get("namespace") or ""),
        folder,
        float(raw.get("kept_at") or 0.0),
    )


def kept_names(backend: str) -> list[str]:
    """The names of the jobs of ``backend`` with a kept state."""
    from ..tracking.store import history_dir

    try:
        return sorted(p.parent.name for p in (history_dir() / backend).glob("*/state.json"))
    except OSError:
        return []


def forget_state(backend: str, name: str) -> None:
    """Remove the job's kept state and logs (a new job of the name starts), keeping its
    record (``run.json``: the tracking state of the new run is written there)."""
    folder = _folder(backend, name)
    for path in (folder / "state.json", folder / _LOCK):
        path.unlink(missing_ok=True)
    shutil.rmtree(folder / "logs", ignore_errors=True)


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


def prune_logs(backend: str, bound: int | None = None) -> list[str]:
    """Keep the kept logs of ``backend`` under ``bound`` bytes (default :data:`LOGS_BOUND`):
    the oldest kept jobs' logs go first. The names whose logs were removed."""
    from ..tracking.store import history_dir

    limit = LOGS_BOUND if bound is None else bound
    sized = []
    for logs in (history_dir() / backend).glob("*/logs"):
        state = logs.parent / "state.json"
        when = state.stat().st_mtime if state.exists() else float("inf")  # not ended: last
        sized.append((when, logs, _size(logs)))
    total = sum(s for _, _, s in sized)
    removed = []
    for _when, logs, size in sorted(sized, key=lambda s: s[0]):
        if total <= limit:
            break
        shutil.rmtree(logs, ignore_errors=True)
        total -= size
        removed.append(logs.parent.name)
    return removed
