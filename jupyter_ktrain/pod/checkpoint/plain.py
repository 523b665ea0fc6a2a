"""``ktrain.checkpoint()``: save training state on the job's storage and resume from it.

Inside ``train()``::

    ckpt = ktrain.checkpoint()
    start = 0
    found = ckpt.load()                  # None on a first run
    if found is not None:
        state, step = found
        model.load_state_dict(state["model"]); start = step + 1
    for step in range(start, steps):
        ...
        if step % 100 == 0:
            ckpt.save({"model": model.state_dict(), ...}, step)

The folder is the job's ``--checkpoints`` mount on a cluster (``KTRAIN_CHECKPOINTS``, set by
the backend), a folder in the job's run directory on the local backend, and a temporary folder
of this process when called outside a job (so running ``train()`` in the kernel never resumes
from a run before). A restarted job (a killed pod, a preempted node, a killed local node) finds
its checkpoints there again.

Contract:

- ``save(state, step)``: off the training path. Rank 0 stages ``state`` (a copy in CPU memory:
  every tensor cloned, pinned when CUDA is there, everything else deep-copied) and returns;
  a background thread then writes ``step-{step}.pt`` with ``torch.save`` into a temporary file,
  fsyncs it, renames it into place and fsyncs the folder. The other ranks do not wait. The next
  save waits only while the previous write still runs (one staged copy at a time);
  ``wait()`` waits for the last write, and so does the job's end (the runtime calls
  :func:`wait_all`), so a finished rank has its checkpoint on disk. A write that fails (a full
  disk) is raised by the next ``save``/``wait`` and at the rank's end. ``save(..., block=True)``
  writes before returning, as a plain ``torch.save`` would. ``step`` is the last step done. The
  newest ``keep`` checkpoints are kept. Each save is reported to the monitor once written as a
  ``checkpoint`` record (step, bytes, ``seconds`` from the call to on disk, ``blocked_s`` the
  training waited, ``write_s`` the write took).
- ``load()``: the newest complete checkpoint as ``(state, step)``, or None. A checkpoint is
  complete once renamed into place: a save killed half-way leaves only its temporary file, so
  the one before stays the newest; a checkpoint that cannot be read (a storage that lost
  data) is skipped with a warning for the one before. Rank 0 reports a ``resume`` record, so
  the monitor says "resumed from step N".
- A DeepSpeed engine instead of a state, or sharded state (``save(state, step,
  sharded=True)``, by default when it holds DTensor/ShardedTensor): every rank calls ``save``
  and writes its part under ``deepspeed/`` or ``dcp/`` of the same folder, and rank 0 points
  that folder's ``latest`` at it atomically once every rank's part is written;
  ``load(engine)`` returns ``(client_state, step)``, ``load(state)`` reads the newest sharded
  checkpoint into ``state`` in place and returns ``(state, step)``. Sharded state is written in
  the background (``torch.distributed.checkpoint.async_save``), an engine only when its config
  asks for DeepSpeed's decoupled writer. See :mod:`.checkpoint_shards`.

The writer writes straight to the file descriptor and starts the device writing every
:data:`.common.WRITEBACK_BYTES` behind it, so the fsync at the end waits for the last
stretch only (:mod:`.checkpoint_core`: what both kinds of checkpoint share).

Standard library only: a checkpoint is written with ``torch.save`` when the program imported
torch (this package never imports it), else with ``pickle``. Checkpoints are pickles
(``torch.load(weights_only=False)``): load only the job's own.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..exits import EXIT_DIR_ENV
from ..report import flush as flush_reports
from . import common as core
from . import shards

__all__ = ["CHECKPOINTS_ENV", "KEEP", "Checkpoints", "checkpoint", "wait_all"]

CHECKPOINTS_ENV = "KTRAIN_CHECKPOINTS"
KEEP = 3
_outside_job: Path | None = None


def checkpoint(folder: str | os.PathLike[str] | None = None, keep: int = KEEP) -> Checkpoints:
    """The job's checkpoints (see module docstring); ``folder`` overrides where they live."""
    if folder is None:
        folder = os.environ.get(CHECKPOINTS_ENV) or _temporary_folder()
    return Checkpoints(folder, keep=keep)


def _temporary_folder() -> Path:
    global _outside_job
    if _outside_job is None:
        _outside_job = Path(tempfile.mkdtemp(prefix="ktrain-checkpoints-"))
        # in a job that has no storage for them
        if os.environ.get(EXIT_DIR_ENV) and core.rank() == 0:
            core.warn(
                "this job has no checkpoint storage: checkpoints go to a temporary folder that "
                "a restarted pod will not find. Give the job --checkpoints PVC:/checkpoints."
            )
    return _outside_job


class Checkpoints:
    """Checkpoints in one folder, written by rank 0 (see module docstring)."""

    def __init__(self, folder: str | os.PathLike[str], keep: int = KEEP) -> None:
        if int(keep) < 1:
            raise ValueError(f"keep={keep!r}: keep at least the newest checkpoint (keep >= 1)")
        self.folder = Path(folder)
        self.keep = int(keep)

    def __repr__(self) -> str:
        return f"Checkpoints({str(self.folder)!r}, keep={self.keep})"

    # -- public -------------------------------------------------------------------------
    def save(
        self, state: Any, step: int, *, block: bool = False, sharded: bool | None = None
    ) -> Path:
        """Save ``state`` as the checkpoint of ``step`` (the last step done); its path. Returns
        once the state is staged (``block=True``: once it is on disk). A DeepSpeed engine, or
        with ``sharded`` (default: when ``state`` holds DTensor/ShardedTensor) every rank's
        part of ``state``: see :mod:`.checkpoint_shards`; every rank calls it then."""
        step = _check_step(step)
        flush_reports()  # the steps up to here are out before a resume could skip them
        if _is_engine(state):
            path = shards.save_engine(state, self.folder, step, self.keep)
            if block:
                self.wait()
            return path
        if sharded or (sharded is None and _holds_shards(state)):
            path = shards.save_sharded(state, self.folder, step, self.keep)
            if block:
                core.WRITER.wait()
            return path
        path = self.folder / f"step-{step}.pt"
        if core.rank() == 0:
            started = time.perf_counter()
            core.WRITER.wait()  # the previous write first: one staged copy at a time
            self.folder.mkdir(parents=True, exist_ok=True)
            staged = _stage(state)
            blocked = time.perf_counter() - started

            def write() -> None:
                begun = time.perf_counter()
                size = core.write_atomic(path, lambda f: _save(staged, f))
                done = time.perf_counter()  # on disk; removing the oldest is not the write
                self._prune()
                core.emit_saved(step, size, done - started, path.name, blocked, done - begun)

            core.WRITER.start(write, f"step-{step}.pt")
            if block:
                core.WRITER.wait()
        return path

    def wait(self) -> None:
        """Wait until the last ``save`` is on disk; raises what its write raised. After a
        DeepSpeed engine's decoupled save, every rank calls it (it commits the save)."""
        wait_all()

    def load(self, into: Any = None, map_location: Any = "cpu") -> tuple[Any, int] | None:
        """The newest complete checkpoint as ``(state, step)``, or None when there is none.
        ``into`` a DeepSpeed engine: loaded into it, ``(client_state, step)``; ``into`` a
        state (a dict of tensors, as saved with ``sharded=True``): the newest sharded
        checkpoint is read into it in place, every rank its part, ``(state, step)``."""
        if into is not None:
            if _is_engine(into):
                return shards.load_engine(into, self.folder)
            return shards.load_sharded(into, self.folder)
        wait_all()  # a save of this process still being written is the newest
        for step, path in reversed(self._on_disk()):
            try:
                state = _load(path, map_location)
            except _NeedsTorch:
                raise
            except Exception as exc:  # a storage that lost data: the one before will do
                core.warn(f"checkpoint {path.name} cannot be read ({exc!r}); trying the one before")
                continue
            core.emit_resumed(step, path.name)
            return state, step
        return None

    def steps(self) -> list[tuple[int, Path]]:
        """The complete checkpoints as ``(step, path)``, oldest first (after this process's
        write in flight)."""
        core.WRITER.wait()
        return self._on_disk()

    def _on_disk(self) -> list[tuple[int, Path]]:
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        found = ((core.FILE.match(n), n) for n in names)
        return sorted((int(m.group(1)), self.folder / n) for m, n in found if m)

    # -- internals ----------------------------------------------------------------------
    def _prune(self) -> None:
        """Keep the newest ``keep`` checkpoints; remove temporary files of killed saves (rank 0
        is the only writer, so any temporary file but its own is left over)."""
        for _, path in self._on_disk()[: -self.keep]:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        for name in os.listdir(self.folder):
            if core.TMP_MARK in name and name.startswith("."):
                with contextlib.suppress(OSError):
                    (self.folder / name).unlink()


def _check_step(step: object) -> int:
    """``step`` as an int (numpy and torch integers too); one clear error otherwise."""
    value: int | None = None
    if not isinstance(step, (bool, float, str)):
        with contextlib.suppress(TypeError, ValueError):
            value = int(step)  # type: ignore[call-overload]
    if value is None or value != step or value < 0:
        raise ValueError(f"step={step!r}: a checkpoint's step is an integer >= 0")
    return value


class _NeedsTorch(RuntimeError):
    pass


def _save(state: Any, f: Any) -> None:
    """``torch.save`` when the program uses torch (it imported it: this package never does),
    else a plain pickle."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.save(state, f)
    else:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)


def _load(path: Path, map_location: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.load(path, map_location=map_location, weights_only=False)
    with open(path, "rb") as f:
        if f.read(2) == b"PK":  # torch.save's zip format
            raise _NeedsTorch(f"checkpoint {path.name} was saved by torch: import torch first")
        f.seek(0)
        return pickle.load(f)


def _is_engine(state: Any) -> bool:
    """A DeepSpeed engine (or anything that saves and loads itself the same way)."""
    return callable(getattr(state, "save_checkpoint", None)) and callable(
        getattr(state, "load_checkpoint", None)
    )


def _holds_shards(state: Any) -> bool:
    sharding = sys.modules.get("torch.distributed.tensor") or sys.modules.get(
        "torch.distributed._shard.sharded_tensor"
    )
    if sharding is None:  # the program uses neither: nothing to look for
        return False
    return shards.holds_shards(state)


def wait_all() -> None:
    """Wait for the checkpoint being written (the job's end calls this; so does every rank
    after a DeepSpeed engine's decoupled save: it commits it); raises what the write raised."""
    core.WRITER.wait()
    shards.finish_engine()


def _stage(state: Any) -> Any:
    """A copy of ``state`` that training cannot change any more: tensors copied into CPU
    memory (pinned when CUDA is there, so a GPU copy is one DMA), everything else deep-copied.
    Tensors shared by several entries stay shared. The buffers of the previous save (written
    by now: a save waits for the write before) are filled again where shapes match, so a
    save costs one memory copy, not an allocation and its page faults."""
    import copy

    torch = sys.modules.get("torch")
    if torch is None:
        return copy.deepcopy(state)
    stager = _Stager(torch, _BUFFERS)
    copied = stager.copy(state)
    if stager.pinned:
        torch.cuda.synchronize()  # the non-blocking device-to-host copies are done
    _BUFFERS[:] = stager.used
    return copied


_BUFFERS: list[Any] = []  # the previous save's staging tensors, in the order they were made


class _Stager:
    def __init__(self, torch: Any, previous: list[Any]) -> None:
        self.torch = torch
        self.pinned = bool(torch.cuda.is_available())
        self.previous = list(previous)
        self.used: list[Any] = []
        self.memo: dict[int, Any] = {}

    def _buffer(self, like: Any) -> Any:
        n = len(self.used)
        old = self.previous[n] if n < len(self.previous) else None
        if old is not None and old.shape == like.shape and old.dtype == like.dtype:
            buf = old
        else:
            buf = self.torch.empty(
                like.shape, dtype=like.dtype, pin_memory=self.pinned and like.device.type != "cpu"
            )
        self.used.append(buf)
        return buf

    def copy(self, obj: Any) -> Any:
        import copy

        found = self.memo.get(id(obj))
        if found is not None:
            return found
        torch = self.torch
        if isinstance(obj, torch.Tensor) and obj.layout == torch.strided and not obj.is_quantized:
            out = self._buffer(obj)
            out.copy_(obj.detach(), non_blocking=obj.device.type != "cpu")
        elif isinstance(obj, torch.Tensor):  # sparse, quantized: cloned as they are
            out = obj.detach().to("cpu", copy=True)
        elif type(obj) in (list, tuple) or isinstance(obj, dict):
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            parts = {k: self.copy(v) for k, v in items}
            if isinstance(obj, dict):  # its own type and attributes (a state_dict's _metadata)
                out = copy.copy(obj)
                out.clear()
                out.update(parts)
            else:
                out = type(obj)(parts.values())
        else:
            out = copy.deepcopy(obj)
        self.memo[id(obj)] = out
        return out
