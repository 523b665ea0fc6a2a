"""A job's record in the job store: what it ran with, and what went to the tracking server.

One private file per job, ``$KTRAIN_HOME/history/BACKEND/NAME/run.json`` (folders ``0700``,
files ``0600``, replaced atomically), written by the process that starts or follows the job::

    {"version": 1, "name", "backend",
     "started": epoch s (the run's; a new job of the name is a new run),
     "params": {...}, "code_sha256",
     "mlflow": {"uri", "experiment", "run_id", "sent": {key: [[lo, hi], ...]}, "finished"}}

``sent`` is what makes tracking idempotent: a kernel that re-attaches reads it and sends no
point twice. One process at a time logs a job (:func:`hold`: the kernel that follows it, or the
Jupyter server while the side panel follows it), so two never send the same point at once.
``%ktrain delete`` removes the folder (:func:`remove`).

Beside it, ``hang.json``: the ranks the follower named as hung while the job ran, and their
stacks (:func:`keep_hang`, :func:`read_hang`; :mod:`jupyter_ktrain.hangs`), which the
side panel shows as the cell does; removed when they move again. The record is versioned
(:data:`RECORD_VERSION`, read by :func:`.versions.versioned`): a newer jupyter-ktrain's record is
refused with one line.

The record is typed: :class:`RunRecord` (its ``mlflow`` part a :class:`MlflowState`), read by
:func:`read_run` and written by :func:`write_run`, converted from and to its JSON here and
nowhere else (an entry a record does not have is omitted from the file, as before types; an
entry this version does not know is ignored). :func:`read_record` and :func:`write_record` are
the file's JSON as it is, for tools and tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .files import FILE_MODE, make_private_dirs, replace_private
from .home import history_dir
from .versions import versioned

__all__ = [
    "RECORD_VERSION",
    "MlflowState",
    "RunRecord",
    "hold",
    "job_dir",
    "keep_hang",
    "read_hang",
    "read_record",
    "read_run",
    "record_name",
    "release",
    "remove",
    "write_record",
    "write_run",
]

RECORD = "run.json"
HANG = "hang.json"
RECORD_VERSION = 1
_TRACKING_LOCK = ".tracking.lock"


Sent = Mapping[str, tuple[tuple[int, int], ...]]  # per metric key, the steps sent: [lo, hi]


def _sent_of(raw: object) -> Sent:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): tuple((int(lo), int(hi)) for lo, hi in v) for k, v in raw.items()}


def _str_or_none(raw: object) -> str | None:
    return None if raw is None else str(raw)


@dataclass(frozen=True)
class MlflowState:
    """Where a job is tracked and how far: the tracking ``uri`` and ``experiment``, the run
    once made (``run_id``, ``experiment_id``), the steps ``sent`` of each metric, the tags its
    run is to carry beside its own (``tags``, None: none given) and whether everything was sent
    (``finished``)."""

    uri: str
    experiment: str
    sent: Sent = field(default_factory=dict)
    tags: Mapping[str, str] | None = None
    run_id: str | None = None
    experiment_id: str | None = None
    finished: bool = False

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MlflowState:
        tags = raw.get("tags")
        return cls(
            uri=str(raw.get("uri") or ""),
            experiment=str(raw.get("experiment") or ""),
            sent=_sent_of(raw.get("sent")),
            tags={str(k): str(v) for k, v in tags.items()} if isinstance(tags, Mapping) else None,
            run_id=_str_or_none(raw.get("run_id")) or None,
            experiment_id=_str_or_none(raw.get("experiment_id")),
            finished=bool(raw.get("finished")),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uri": self.uri,
            "experiment": self.experiment,
            "sent": {k: [list(span) for span in v] for k, v in self.sent.items()},
        }
        if self.tags is not None:
            out["tags"] = dict(self.tags)
        if self.run_id is not None:
            out["run_id"] = self.run_id
        if self.experiment_id is not None:
            out["experiment_id"] = self.experiment_id
        if self.finished:
            out["finished"] = True
        return out


@dataclass(frozen=True)
class RunRecord:
    """A job's record (see the module docstring): its ``name`` and ``backend``, when its run
    ``started`` (epoch s), its ``params`` and ``code_sha256``, ``run``: its run of a warm job
    (None: any other job), and ``mlflow``: where it is tracked (None: untracked)."""

    name: str
    backend: str = ""
    started: float | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    code_sha256: str = ""
    run: int | None = None
    mlflow: MlflowState | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> RunRecord:
        """The record a file's JSON holds (entries it lacks take their defaults, those this
        version does not know are ignored)."""
        params, mlflow, started = raw.get("params"), raw.get("mlflow"), raw.get("started")
        run = raw.get("run")
        return cls(
            name=str(raw.get("name") or ""),
            backend=str(raw.get("backend") or ""),
            started=float(started) if isinstance(started, (int, float)) else None,
            params={str(k): v for k, v in params.items()} if isinstance(params, Mapping) else {},
            code_sha256=str(raw.get("code_sha256") or ""),
            run=run if isinstance(run, int) and not isinstance(run, bool) else None,
            mlflow=MlflowState.from_json(mlflow) if isinstance(mlflow, Mapping) else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The record as its file holds it (without ``version``: :func:`write_run` adds it)."""
        out: dict[str, Any] = {
            "name": self.name,
            "backend": self.backend,
            "started": self.started,
            "params": dict(self.params),
            "code_sha256": self.code_sha256,
        }
        if self.run is not None:
            out["run"] = self.run
        if self.mlflow is not None:
            out["mlflow"] = self.mlflow.to_json()
        return out


def record_name(job: str, run: int | None = None) -> str:
    """Where the record of job ``job`` is kept: under its name; run ``run`` of a warm job
    under ``NAME/runs/N`` (each run a record, and an MLflow run, of its own)."""
    return job if run is None else f"{job}/runs/{run}"


def job_dir(backend: str, name: str) -> Path:
    """The job's history folder: ``$KTRAIN_HOME/history/BACKEND/NAME``."""
    return history_dir() / backend / name


def read_record(backend: str, name: str) -> dict[str, Any] | None:
    """The job's record; None when there is none (or it is no record); a newer version's is
    refused (:class:`~.versions.StoreVersionError`, one line)."""
    try:
        data = json.loads((job_dir(backend, name) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return versioned(data, f"history/{backend}/{name}/{RECORD}", "record", RECORD_VERSION)


def write_record(backend: str, name: str, record: dict[str, Any]) -> None:
    """Replace the job's record (atomically: a reader sees the old one or the new one)."""
    folder = job_dir(backend, name)
    make_private_dirs(folder)
    data = {**record, "version": RECORD_VERSION}
    replace_private(folder / RECORD, json.dumps(data, sort_keys=True).encode())


def read_run(backend: str, name: str) -> RunRecord | None:
    """The job's record, typed; None when there is none (or it is no record); a newer
    version's is refused (:class:`~.versions.StoreVersionError`, one line)."""
    raw = read_record(backend, name)
    return None if raw is None else RunRecord.from_json(raw)


def write_run(backend: str, name: str, record: RunRecord) -> None:
    """Replace the job's record with ``record`` (atomically)."""
    write_record(backend, name, record.to_json())


def keep_hang(backend: str, name: str, said: dict[str, Any] | None) -> None:
    """Keep what the follower says of the job's hang now (``{"started", "t", "text",
    "stacks"}``), or forget it (None). Never raises: the store is a second view."""
    path = job_dir(backend, name) / HANG
    try:
        if said is None:
            path.unlink(missing_ok=True)
            return
        make_private_dirs(path.parent)
        replace_private(path, json.dumps(said, sort_keys=True).encode())
    except OSError:
        pass


def read_hang(backend: str, name: str) -> dict[str, Any] | None:
    """What :func:`keep_hang` kept, or None."""
    try:
        data = json.loads((job_dir(backend, name) / HANG).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def remove(backend: str, name: str) -> Path | None:
    """Delete the job's history folder; the folder it was, or None when there was none."""
    folder = job_dir(backend, name)
    if not folder.is_dir():
        return None
    shutil.rmtree(folder, ignore_errors=True)
    return folder


def hold(backend: str, name: str) -> int | None:
    """Take the right to log the job to its tracking server (an exclusive lock, given back by
    :func:`release` or when the process ends); None while another process holds it."""
    folder = job_dir(backend, name)
    try:
        make_private_dirs(folder)
        fd = os.open(folder / _TRACKING_LOCK, os.O_RDWR | os.O_CREAT, FILE_MODE)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by another process (or another follower here)
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    """Give back what :func:`hold` took."""
    if fd is not None:
        os.close(fd)
