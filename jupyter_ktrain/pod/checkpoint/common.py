"""What plain checkpoints (:mod:`.checkpoint`) and the ones every rank writes a part of
(:mod:`.checkpoint_shards`) share: the process's one background writer, the atomic and durable
write of a file, the names on disk, this rank and its process group, and the ``checkpoint``
and ``resume`` records for the monitor.

The writer writes straight to the file descriptor and starts the device writing every
:data:`WRITEBACK_BYTES` behind it, so the fsync at the end waits for the last stretch only.
Standard library only: ``torch.distributed`` is taken from ``sys.modules`` when the program
imported it, never imported here.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from ..protocol import Checkpoint, Resume

__all__ = [
    "FILE",
    "TAG",
    "TMP_MARK",
    "WRITEBACK_BYTES",
    "WRITER",
    "barrier",
    "emit_resumed",
    "emit_saved",
    "rank",
    "torch_dist",
    "warn",
    "world_size",
    "write_atomic",
]

WRITEBACK_BYTES = 32 << 20
FILE = re.compile(r"^step-(\d+)\.pt$")  # a plain checkpoint
TAG = re.compile(r"^step-(\d+)$")  # a tag every rank writes a part of
TMP_MARK = ".tmp-"


def write_atomic(path: Path, write: Any) -> int:
    """Write ``path`` through ``write(file)`` into a temporary file, fsync, rename, fsync the
    folder: after a crash at any point, ``path`` is the old file or the whole new one. The
    number of bytes written."""
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, "wb", buffering=0) as f:
            out = _WritingBack(f.fileno())
            write(out)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_folder(path.parent)
    return out.written


class _WritingBack:
    """A file for ``torch.save``/``pickle.dump`` that writes straight to ``fd`` (no buffer
    copy; a full disk raises ENOSPC as it is) and starts the device writing every
    :data:`WRITEBACK_BYTES` behind it: the final fsync then waits for the last stretch only,
    not for the whole file, so serialising and the device's writing overlap. The written
    pages also leave the page cache once on disk (a checkpoint is not read back soon)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.written = 0
        self._kicked = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.write(self.fd, view[done:])
        self.written += done
        if self.written - self._kicked >= WRITEBACK_BYTES:
            # DONTNEED on dirty pages starts their writeback without waiting for it (Linux)
            with contextlib.suppress(OSError, AttributeError):
                os.posix_fadvise(self.fd, self._kicked, self.written - self._kicked,
                                 os.POSIX_FADV_DONTNEED)  # fmt: skip
            self._kicked = self.written
        return done

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.written


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (some file systems cannot fsync a folder: then it is as
    durable as they make it)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def torch_dist() -> Any:
    """``torch.distributed`` when the program initialised it, else None (torch not imported
    by the program means no process group)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def rank() -> int:
    dist = torch_dist()
    if dist is not None:
        return int(dist.get_rank())
    raw = os.environ.get("RANK", "")
    return int(raw) if raw.isdigit() else 0


def barrier() -> None:
    dist = torch_dist()
    if dist is not None and dist.get_world_size() > 1:
        dist.barrier()


def world_size() -> int:
    dist = torch_dist()
    if dist is not None:
        return int(dist.get_world_size())
    raw = os.environ.get("WORLD_SIZE", "")
    return int(raw) if raw.isdigit() else 1


def emit_saved(
    step: int, size: int, seconds: float, name: str, blocked: float, write: float
) -> None:
    _emit(Checkpoint(step, size, round(seconds, 4), round(blocked, 4), round(write, 4), name,
                     world_size()))  # fmt: skip


def emit_resumed(step: int, name: str) -> None:
    if rank() == 0:
        _emit(Resume(step, name, world_size()))


def _emit(record: Checkpoint | Resume) -> None:
    """One record for the monitor, written as ``ktrain.report`` writes its own (in a job's
    rank only; never raises into training)."""
    try:
        from ..report import emit

        emit(record)
    except Exception as exc:
        warn(f"could not report {record.format()} ({exc!r})")


def warn(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"ktrain.checkpoint: {message}\n")


class _Writer:
    """The process's one background checkpoint writer: at most one write in flight. Its
    thread is not a daemon: an interpreter that ends normally waits for it too."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._what = ""

    def start(self, write: Any, what: str) -> None:
        self.wait()
        self._what = what
        self._thread = threading.Thread(
            target=self._run, args=(write,), name="ktrain-checkpoint-writer"
        )
        self._thread.start()

    def _run(self, write: Any) -> None:
        try:
            write()
        except BaseException as exc:
            self._error = exc
            warn(f"writing checkpoint {self._what} failed: {exc!r}")

    def wait(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error


WRITER = _Writer()  # the process's one writer: plain, sharded and DeepSpeed saves alike
