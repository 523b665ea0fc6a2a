"""A job's record in the job store: what it ran with, and what went to the tracking server.

One private file per job, ``$KTRAIN_HOME/history/BACKEND/NAME/run.json`` (folders ``0700``,
files ``0600``, replaced atomically), written by the process that starts or follows the job::

    {"name", "backend", "started": epoch s (the run's; a new job of the name is a new run),
     "params": {...}, "code_sha256",
     "mlflow": {"uri", "experiment", "run_id", "sent": {key: [[lo, hi], ...]}, "finished"}}

``sent`` is what makes tracking idempotent: a kernel that re-attaches reads it and sends no
point twice. ``%ktrain delete`` removes the folder (:func:`remove`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..backends.jobstore import make_private_dirs, replace_private

__all__ = ["history_dir", "job_dir", "read_record", "remove", "write_record"]

RECORD = "run.json"


def history_dir() -> Path:
    """``$KTRAIN_HOME/history`` (default ``~/.ktrain/history``)."""
    return Path(os.environ.get("KTRAIN_HOME") or Path.home() / ".ktrain") / "history"


def job_dir(backend: str, name: str) -> Path:
    return history_dir() / backend / name


def read_record(backend: str, name: str) -> dict[str, Any] | None:
    """The job's record; None when there is none (or it cannot be read)."""
    try:
        data = json.loads((job_dir(backend, name) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(backend: str, name: str, record: dict[str, Any]) -> None:
    """Replace the job's record (atomically: a reader sees the old one or the new one)."""
    folder = job_dir(backend, name)
    make_private_dirs(folder)
    replace_private(folder / RECORD, json.dumps(record, sort_keys=True).encode())


def remove(backend: str, name: str) -> Path | None:
    """Delete the job's history folder; the folder it was, or None when there was none."""
    folder = job_dir(backend, name)
    if not folder.is_dir():
        return None
    shutil.rmtree(folder, ignore_errors=True)
    return folder
