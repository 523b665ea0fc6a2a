"""Local jobs in the job store: one private folder per job (``$KTRAIN_HOME/jobs/NAME``),
created exclusively, and the locked ``state.json`` of a job folder (or of a history folder,
:mod:`.history`).

Folders are ``0700`` and files ``0600`` (:mod:`.files`). A job folder is created with one
``mkdir`` that fails when the name is taken, so two kernels starting one name never share or
delete each other's files. ``state.json`` is written atomically under a lock (the supervisor,
its watchdog and a cancel may all write a job's final state; the first one wins), and a small
reserve file is given back when the disk is full so that the final state can still be written.
A store that cannot be written is one :class:`~jupyter_ktrain.errors.BackendError` naming the
folder and the fix (:func:`.files.store_error`). What ``state.json`` holds, and its version, is
its writer's (:mod:`..backends.local.state`, :mod:`.history`): here it is JSON.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..jobs import TERMINAL_STATES
from .files import DIR_MODE, FILE_MODE, make_private_dirs, store_error, write_private

__all__ = [
    "LOCK",
    "STATE",
    "create_job_dir",
    "job_marker",
    "read_state",
    "release_reserve",
    "update_state",
    "write_state",
]

STATE = "state.json"
LOCK = ".state.lock"
_RESERVE = ".reserve"
_RESERVE_BYTES = 256 * 1024
_FULL = (errno.ENOSPC, errno.EDQUOT)


def create_job_dir(jobs: Path, name: str) -> Path:
    """Create ``jobs/name`` for a new job, exclusively: a name already taken (by a finished job,
    or by another kernel a moment ago) is a :class:`SpecError` and nothing is touched."""
    try:
        make_private_dirs(jobs)
        path = jobs / name
        path.mkdir(mode=DIR_MODE)
    except FileExistsError:
        raise SpecError(
            f"A local job named {name!r} already exists. Add --replace to delete it and run "
            f"again, pick another --name, or remove it with `%ktrain delete {name}`."
        ) from None
    except OSError as exc:
        raise store_error(jobs, exc) from None
    try:
        write_private(path / LOCK, b"")
        write_private(path / _RESERVE, b"\0" * _RESERVE_BYTES)
    except OSError as exc:
        shutil.rmtree(path, ignore_errors=True)  # ours: made just above
        raise store_error(jobs, exc) from None
    return path


def release_reserve(job_dir: Path) -> None:
    """Give back the job's reserve once nothing more will be written (its final state is)."""
    with contextlib.suppress(OSError):
        (job_dir / _RESERVE).unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(job_dir: Path) -> Iterator[None]:
    fd = os.open(job_dir / LOCK, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_state(job_dir: Path) -> dict[str, Any] | None:
    """The folder's ``state.json`` as JSON (typed by its writer: :mod:`..backends.local.state`,
    :mod:`.history`); None before anyone wrote it."""
    try:
        state: dict[str, Any] = json.loads((job_dir / STATE).read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state


def write_state(job_dir: Path, state: dict[str, Any]) -> None:
    """Replace ``state.json`` atomically (readers see the old or the new file, whole)."""
    with _locked(job_dir):
        _replace(job_dir, json.dumps(state, indent=1, sort_keys=True).encode())


def update_state(job_dir: Path, changes: dict[str, Any], marker: str | None = None) -> bool:
    """Apply ``changes`` unless the job already has a final state; True when this call wrote
    them. The supervisor, its watchdog and a cancel may race to say how a job ended: the first
    final state written is the truth, and nothing changes it afterwards. With ``marker``, only
    while the folder still holds that job (``--replace`` may have put a new one there)."""
    with _locked(job_dir):
        if marker is not None and job_marker(job_dir) != marker:
            return False
        state = read_state(job_dir) or {}
        if state.get("state") in TERMINAL_STATES:
            return False
        state.update(changes)
        _replace(job_dir, json.dumps(state, indent=1, sort_keys=True).encode())
        return True


def job_marker(job_dir: Path) -> str | None:
    """The job's unique marker (``plan.json``), which every process of it carries; None when
    the folder holds no job (deleted, or being created)."""
    try:
        return str(json.loads((job_dir / "plan.json").read_text())["marker"])
    except (OSError, ValueError, KeyError):
        return None


def _replace(job_dir: Path, data: bytes) -> None:
    tmp = job_dir / (STATE + ".tmp")
    try:
        _write_new(tmp, data)
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        # the disk is full: give back the reserve so the job's last word can be written
        (job_dir / _RESERVE).unlink(missing_ok=True)
        _write_new(tmp, data)
    os.replace(tmp, job_dir / STATE)


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        os.close(fd)
