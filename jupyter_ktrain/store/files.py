"""Private folders and files of the job store: folders ``0700`` and files ``0600`` (a shared
machine's other users read nothing of a job: its code may hold data paths, its logs what it
printed), created whole or replaced atomically; and the one error for a store this process
cannot use, naming the folder and the fix.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

from ..errors import BackendError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "make_private_dirs",
    "open_append",
    "replace_private",
    "store_error",
    "write_private",
]

DIR_MODE = 0o700
FILE_MODE = 0o600


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
