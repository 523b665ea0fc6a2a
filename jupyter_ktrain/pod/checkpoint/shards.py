"""Checkpoints every rank writes a part of (:mod:`.checkpoint` dispatches here): a DeepSpeed
engine's and sharded state's through ``torch.distributed.checkpoint``.

Both live in a folder of tags beside the plain checkpoints (``deepspeed/step-N/``,
``dcp/step-N/``) with a ``latest`` file that rank 0 writes atomically only once every rank's
part of the tag is written: a crash before leaves the tag before as the newest.

- A DeepSpeed engine: ``engine.save_checkpoint`` on every rank. With DeepSpeed's decoupled
  checkpoint engine (``"checkpoint": {"writer": {"decoupled": true}}`` in the engine's config:
  a writer process per rank writes the shards while training goes on) it returns once the
  shards are queued; the save is committed (every rank's writer done, then ``latest``) at the
  next ``save``/``load``/``wait`` and the job's end, or by DeepSpeed's own next
  ``engine.step()`` (which waits for it). Without it the write is synchronous, as
  ``save_checkpoint`` is.
- Sharded state (DTensor, ShardedTensor, or ``save(..., sharded=True)``): every rank stages its
  shards into CPU memory and ``torch.distributed.checkpoint.async_save`` writes them in the
  background over a gloo process group of its own (not the training's: the writer's
  collectives must not interleave with training's). Rank 0's save is done when its Future is:
  DCP's coordinator writes the tag's metadata only after every rank wrote its files.

Standard library at import: torch and its distributed checkpoint are imported when used.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import common as core

DEEPSPEED_DIR = "deepspeed"
SHARDED_DIR = "dcp"
LATEST = "latest"


def _tags(root: Path) -> list[tuple[int, str]]:
    """The tags in ``root`` (complete or not), oldest first."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted((int(m.group(1)), n) for n in names if (m := core.TAG.match(n)))


def _latest(root: Path) -> str | None:
    """The tag ``root/latest`` names, or None."""
    try:
        return (root / LATEST).read_text().strip() or None
    except FileNotFoundError:
        return None


def _commit(root: Path, tag: str, keep: int) -> int:
    """Rank 0, once every rank's part of ``tag`` is written: point ``latest`` at it, drop the
    tags beyond the newest ``keep`` (and any newer one left by a save that never committed:
    it is not ``latest``, and a resumed run writes its step again), the tag's bytes."""
    core.write_atomic(root / LATEST, lambda f: f.write(tag.encode()))
    tags = _tags(root)
    step = int(core.TAG.match(tag).group(1))  # type: ignore[union-attr]
    kept = [n for s, n in tags if s <= step][-keep:]
    for _, old in tags:
        if old not in kept:
            shutil.rmtree(root / old, ignore_errors=True)
    return sum(p.stat().st_size for p in (root / tag).rglob("*") if p.is_file())


# -- DeepSpeed ------------------------------------------------------------------------------
def is_decoupled(engine: Any) -> bool:
    """The engine writes its checkpoints in the background (DeepSpeed's decoupled engine)."""
    ce = getattr(engine, "checkpoint_engine", None)
    check = getattr(ce, "is_decoupled", None)
    return bool(callable(check) and check())


class _EngineCommit:
    """A decoupled DeepSpeed save queued on every rank, not yet pointed at by ``latest``."""

    def __init__(self, engine: Any, root: Path, tag: str, step: int, keep: int) -> None:
        self.engine, self.root, self.tag, self.step, self.keep = engine, root, tag, step, keep
        self.started = time.perf_counter()
        self.queued = self.started  # set when save_checkpoint returned
        self.wall_queued = time.time()

    def finish(self, written: float | None = None) -> None:
        """On every rank (collective): wait for this rank's writer, then rank 0 writes
        ``latest``. DeepSpeed's own ``engine.step()`` may have committed it already (it waits
        for the writers and holds a barrier after): then only ``latest`` is left to write.
        ``written``: when a synchronous save's shards were all written."""
        synchronous = written is not None  # the write was the save's call itself
        ce = None if synchronous else self.engine.checkpoint_engine
        info = ce.get_commit_info() if ce is not None else None
        if ce is not None and info is not None and info.tag == self.tag:
            ce.commit(info)
            written = time.perf_counter()
            core.barrier()  # every rank's writer is done before "latest" names the tag
        if core.rank() != 0:
            return
        if written is None:  # committed by engine.step(): written when its last file was
            written = self.queued + max(0.0, self._newest_file() - self.wall_queued)
        size = _commit(self.root, self.tag, self.keep)
        blocked = self.queued - self.started
        write = written - (self.started if synchronous else self.queued)
        core.emit_saved(self.step, size, written - self.started, f"{DEEPSPEED_DIR}/{self.tag}",
                        blocked, write)  # fmt: skip

    def _newest_file(self) -> float:
        times = [p.stat().st_mtime for p in (self.root / self.tag).rglob("*") if p.is_file()]
        return max(times, default=self.wall_queued)


_ENGINE_PENDING: list[_EngineCommit] = []  # at most one


def finish_engine() -> None:
    """Commit the decoupled DeepSpeed save still pending (every rank calls this)."""
    if _ENGINE_PENDING:
        _ENGINE_PENDING.pop().finish()


def save_engine(engine: Any, folder: Path, step: int, keep: int) -> Path:
    core.WRITER.wait()  # a plain or sharded save still being written goes first
    finish_engine()
    root = folder / DEEPSPEED_DIR
    tag = f"step-{step}"
    pending = _EngineCommit(engine, root, tag, step, keep)
    root.mkdir(parents=True, exist_ok=True)
    engine.save_checkpoint(
        str(root), tag=tag, client_state={"ktrain_step": step}, save_latest=False
    )
    pending.queued = time.perf_counter()
    pending.wall_queued = time.time()
    if is_decoupled(engine):
        _ENGINE_PENDING.append(pending)  # written in the background: committed later
    else:
        core.barrier()  # every rank's shards are written before "latest" names them
        pending.finish(written=pending.queued)
        core.barrier()
    return root / tag


def load_engine(engine: Any, folder: Path) -> tuple[Any, int] | None:
    core.WRITER.wait()
    finish_engine()
    root = folder / DEEPSPEED_DIR
    if _latest(root) is None:
        return None
    with _own_checkpoints_load(engine):
        path, client_state = engine.load_checkpoint(str(root))
    if path is None:
        return None
    client_state = dict(client_state or {})
    step = int(client_state.pop("ktrain_step"))
    core.emit_resumed(step, f"{DEEPSPEED_DIR}/step-{step}")
    return client_state, step


@contextlib.contextmanager
def _own_checkpoints_load(engine: Any) -> Iterator[None]:
    """DeepSpeed's decoupled checkpoint engine reads with ``torch.load``'s default
    ``weights_only=True`` (torch >= 2.6), which refuses the engine's own checkpoints (they
    hold more than tensors): while it loads, it reads them as the torch checkpoint engine
    does. These are the job's own checkpoints, as for every ``ktrain.checkpoint`` load."""
    if not is_decoupled(engine):
        yield
        return
    torch = sys.modules["torch"]  # a DeepSpeed engine is there: so is torch (never imported here)
    ce = engine.checkpoint_engine

    def load(path: str, map_location: Any = None) -> Any:
        return torch.load(path, map_location=map_location, weights_only=False)

    ce.load = load
    try:
        yield
    finally:
        del ce.load  # its own method again


# -- sharded state (torch.distributed.checkpoint) --------------------------------------------
_GROUP: list[Any] = []  # the writer's own gloo process group, made at the first sharded save


def holds_shards(state: Any) -> bool:
    """``state`` holds a DTensor or a ShardedTensor (only when the program imported them)."""
    found = (
        getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None),
        getattr(sys.modules.get("torch.distributed._shard.sharded_tensor"), "ShardedTensor", None),
    )
    kinds = tuple(k for k in found if isinstance(k, type))
    if not kinds:
        return False

    def walk(obj: Any) -> bool:
        if isinstance(obj, kinds):
            return True
        if isinstance(obj, dict):
            return any(walk(v) for v in obj.values())
        if type(obj) in (list, tuple):
            return any(walk(v) for v in obj)
        return False

    return walk(state)


def _group() -> Any:
    """A gloo process group for the writer's collectives (CPU ones: async_save needs them),
    or None outside ``torch.distributed``. Made once, by every rank at its first save."""
    dist = core.torch_dist()
    if dist is None:
        return None
    if not _GROUP:
        _GROUP.append(dist.new_group(backend="gloo"))
    return _GROUP[0]


def save_sharded(state: Any, folder: Path, step: int, keep: int) -> Path:
    """Every rank: stage this rank's part of ``state`` and write it in the background."""
    dcp: Any = importlib.import_module("torch.distributed.checkpoint")

    core.WRITER.wait()  # the previous save first: one staged copy at a time
    finish_engine()
    root = folder / SHARDED_DIR
    tag = f"step-{step}"
    path = root / tag
    started = time.perf_counter()
    if core.rank() == 0:
        shutil.rmtree(path, ignore_errors=True)  # an uncommitted one of a run before
        path.mkdir(parents=True)
    core.barrier()
    group = _group()
    future = dcp.async_save(
        state, checkpoint_id=str(path), process_group=group, no_dist=group is None
    )
    blocked = time.perf_counter() - started

    def write() -> None:
        future.result()  # this rank's files; rank 0's: every rank's, and the metadata
        if core.rank() != 0:
            return
        size = _commit(root, tag, keep)
        done = time.perf_counter()
        core.emit_saved(step, size, done - started, f"{SHARDED_DIR}/{tag}", blocked,
                        done - started - blocked)  # fmt: skip

    core.WRITER.start(write, f"{SHARDED_DIR}/{tag}")
    return path


def load_sharded(state: Any, folder: Path) -> tuple[Any, int] | None:
    """Fill ``state`` in place from the newest sharded checkpoint (every rank reads its part):
    ``(state, step)``, or None when there is none."""
    dcp: Any = importlib.import_module("torch.distributed.checkpoint")

    core.WRITER.wait()
    root = folder / SHARDED_DIR
    tag = _latest(root)
    if tag is None:
        if any(core.FILE.match(n) for n in _names(folder)):
            raise ValueError(
                f"{folder} holds checkpoints saved without sharded=True: load them with "
                "ckpt.load() (no state to fill), or save with ckpt.save(state, step, sharded=True)"
            )
        return None
    step = int(core.TAG.match(tag).group(1))  # type: ignore[union-attr]
    dcp.load(state, checkpoint_id=str(root / tag), process_group=_group(),
             no_dist=core.torch_dist() is None)  # fmt: skip
    core.emit_resumed(step, f"{SHARDED_DIR}/{tag}")
    return state, step


def _names(folder: Path) -> list[str]:
    with contextlib.suppress(FileNotFoundError):
        return os.listdir(folder)
    return []
