"""The local job store on disk: one private folder per job, created exclusively.

Folders are ``0700`` and files ``0600`` (a shared machine's other users read nothing of a
job: its code may hold data paths, its logs what it printed). A job folder is created with one
``mkdir`` that fails when the name is taken, so two kernels starting one name never share or
delete each other's files. ``state.json`` is written atomically under a lock (the supervisor,
its watchdog and a cancel may all write a job's final state; the first one wins), and a small
reserve file is given back when the disk is full so that the final state can still be written.
A store that cannot be written is one :class:`~jupyter_ktrain.errors.BackendError` naming the
folder and the fix.
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
from typing import IO, Any

from ..errors import BackendError, SpecError
from ..jobs import TERMINAL_STATES

__all__ = [
    "create_job_dir",
    "job_marker",
    "make_private_dirs",
    "open_append",
    "read_state",
    "release_reserve",
    "store_error",
    "update_state",
    "write_private",
    "write_state",
]

DIR_MODE = 0o700
FILE_MODE = 0o600
STATE = "state.json"
_LOCK = ".state.lock"
_RESERVE = ".reserve"
_RESERVE_BYTES = 256 * 1024
_FULL = (errno.ENOSPC, errno.EDQUOT)


def store_error(path: Path, exc: OSError, doing: str = "write") -> BackendError:
    """The one error for a job store this process cannot use, with the fix."""
    why = exc.strerror or type(exc).__name__
    return BackendError(
        f"Cannot {doing} the local job store at {path} ({why}). Point KTRAIN_HOME at a folder "
        f"you can write (`%env KTRAIN_HOME=/path/to/folder` in the notebook, `export "
        f"KTRAIN_HOME=...` in a shell), or fix that folder's permissions or free space."
    )


def make_private_dirs(path: Path) -> None:
    """``mkdir -p`` with every folder it creates ``0700`` (folders already there are kept)."""
    missing = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by a concurrent start: fine
            folder.mkdir(mode=DIR_MODE)


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
        write_private(path / _LOCK, b"")
        write_private(path / _RESERVE, b"\0" * _RESERVE_BYTES)
    except OSError as exc:
        shutil.rmtree(path, ignore_errors=True)  # ours: made just above
        raise store_error(jobs, exc) from None
    return path


def release_reserve(job_dir: Path) -> None:
    """Give back the job's reserve once nothing more will be written (its final state is)."""
    with contextlib.suppress(OSError):
        (job_dir / _RESERVE).unlink(missing_ok=True)


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist yet) with mode 0600 and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def replace_private(path: Path, data: bytes) -> None:
    """Replace ``path`` atomically (mode 0600): readers see the old file or the new, whole."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    write_private(tmp, data)
    os.replace(tmp, path)


def open_append(path: Path) -> IO[bytes]:
    """``path`` opened for appending, unbuffered, created 0600 when missing."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    return os.fdopen(fd, "ab", buffering=0)


@contextlib.contextmanager
def _locked(job_dir: Path) -> Iterator[None]:
    fd = os.open(job_dir / _LOCK, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_state(job_dir: Path) -> dict[str, Any] | None:
    """The job's ``state.json`` as JSON (typed: :mod:`.local.state`); None before the supervisor
    wrote it."""
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
