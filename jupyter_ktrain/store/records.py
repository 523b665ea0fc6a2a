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
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import Any

from .files import FILE_MODE, make_private_dirs, replace_private
from .home import history_dir
from .versions import versioned

__all__ = [
    "RECORD_VERSION",
    "hold",
    "job_dir",
    "keep_hang",
    "read_hang",
    "read_record",
    "record_name",
    "release",
    "remove",
    "write_record",
]

RECORD = "run.json"
HANG = "hang.json"
RECORD_VERSION = 1
_TRACKING_LOCK = ".tracking.lock"


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
