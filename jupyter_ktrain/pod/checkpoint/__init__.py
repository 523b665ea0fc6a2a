"""``ktrain.checkpoint()``: ``plain.py`` (saves written in the background, resumes),
``shards.py`` (what every rank writes a part of: sharded state, a DeepSpeed engine) and, below
both, ``common.py`` (the background writer, atomic writes, the rank, the checkpoint and resume
records)."""

from __future__ import annotations

from .plain import Checkpoints, checkpoint

__all__ = ["Checkpoints", "checkpoint"]
