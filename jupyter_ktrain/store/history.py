"""A job's history in the job store: its final state, kept after the objects that ran it.

A local job's folder (``$KTRAIN_HOME/jobs/NAME``, :mod:`.jobdirs`) is its history already: it
is there until ``%ktrain delete``. A cluster job's objects are not ours to keep (``--ttl``,
``%ktrain delete``, the operator's clean-up remove them), so when any process sees it ended
(the kernel's follow, ``%ktrain status``, the panel's server), its final
:class:`~jupyter_ktrain.jobs.JobStatus` and shape are written, the same way a local job's
``state.json`` is (:func:`.jobdirs.write_state`: atomic, locked), to::

    $KTRAIN_HOME/history/BACKEND/NAME/state.json
        {"version": 1, "status": ..., "shape": ..., "uid", "namespace", "kept_at"}

beside the job's record (``run.json``, :mod:`.records`) and its pods' lines
(``logs/UID/POD.log``, written by the Kubernetes backend's log follower). The logs are
size-bounded: each pod's file keeps its newest 16 MiB or so, and all kept logs of a backend
together at most :data:`LOGS_BOUND` bytes (the oldest jobs' logs are removed first; their state
and record, a few KiB, stay). ``%ktrain delete NAME --history`` removes a job's history.

The file is read by :mod:`.versions`' rule: entries this version does not know are ignored, in
the status, its replicas, its evictions and the shape alike (a newer writer may add some); a
newer version's file is refused with one line (:class:`~.versions.StoreVersionError`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from ..jobs import Eviction, JobShape, JobState, JobStatus, ReplicaStatus
from ..pod.progress import Progress
from .files import make_private_dirs
from .home import history_dir
from .jobdirs import LOCK, STATE, read_state, write_state
from .records import job_dir
from .versions import versioned

__all__ = [
    "HISTORY_VERSION",
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

HISTORY_VERSION = 1
LOGS_BOUND = int(os.environ.get("KTRAIN_HISTORY_BYTES") or 1 << 30)  # 1 GiB per backend

T = TypeVar("T")


def _known(cls: type[T], raw: Mapping[str, Any]) -> T:
    """``cls(**raw)`` with the entries ``cls`` has no field for left out (a newer store's)."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in raw.items() if k in names})


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
        replicas=tuple(_known(ReplicaStatus, r) for r in raw.get("replicas") or ()),
        started=raw.get("started"),
        finished=raw.get("finished"),
        failed_rank=raw.get("failed_rank"),
        progress=Progress.from_dict(raw.get("progress")),
        max_restarts=raw.get("max_restarts"),
        evictions=tuple(_known(Eviction, e) for e in raw.get("evictions") or ()),
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
    folder = job_dir(backend, status.name)
    make_private_dirs(folder)
    raw = {
        "version": HISTORY_VERSION,
        "status": status_to_json(status),
        "shape": asdict(shape) if shape is not None else None,
        "uid": uid,
        "namespace": namespace,
        "kept_at": time.time(),
    }
    write_state(folder, raw)
    return folder


def kept(backend: str, name: str) -> KeptJob | None:
    """The job's history; None when none was kept (or it cannot be read); a newer version's
    is refused (:class:`~.versions.StoreVersionError`, one line)."""
    folder = job_dir(backend, name)
    raw = read_state(folder)
    if not raw or not isinstance(raw.get("status"), dict):
        return None
    raw = versioned(raw, f"history/{backend}/{name}/{STATE}", "kept job", HISTORY_VERSION)
    try:
        status = replace(status_from_json(raw["status"]), from_history=True)
        shape = _known(JobShape, raw["shape"]) if isinstance(raw.get("shape"), dict) else None
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
    try:
        return sorted(p.parent.name for p in (history_dir() / backend).glob("*/state.json"))
    except OSError:
        return []


def forget_state(backend: str, name: str) -> None:
    """Remove the job's kept state and logs (a new job of the name starts), keeping its
    record (``run.json``: the tracking state of the new run is written there)."""
    folder = job_dir(backend, name)
    for path in (folder / STATE, folder / LOCK):
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
