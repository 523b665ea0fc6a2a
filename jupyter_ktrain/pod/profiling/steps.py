"""A rank's step boundaries, from what the job already reports: every ``ktrain.report(step=...)``
(:mod:`.report`) and every Trainer step (:mod:`.integrations`, on every rank) calls
:func:`mark`. A boundary is a step number that differs from the last one marked (a step that
reports twice is one boundary).

What waits for them (:mod:`.profiler`: ``ktrain profile`` starts and stops ``torch.profiler``
at boundaries) registers a hook with :func:`on_boundary`; the hook runs on the thread that
marked, so what it starts and stops covers exactly the steps between. :func:`mark` costs a
comparison when no hook waits (the training loop must not feel it). Standard library only.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

__all__ = ["last", "mark", "on_boundary"]

_last: int | None = None  # the last step marked; None: this rank marked none yet
_hooks: list[Callable[[int], bool]] = []


def mark(step: int) -> None:
    """Step ``step`` ended (or began: whichever the job reports, consistently). Never raises."""
    global _last
    if step == _last:
        return
    _last = step
    if not _hooks:
        return
    for hook in list(_hooks):
        try:
            done = hook(step)
        except Exception as exc:  # a hook's failure never reaches training
            done = True
            with contextlib.suppress(Exception):
                sys.stderr.write(f"jupyter-ktrain: a step hook failed ({exc!r})\n")
        if done:
            with contextlib.suppress(ValueError):
                _hooks.remove(hook)


def last() -> int | None:
    """The last step marked in this process, None when none was."""
    return _last


def on_boundary(hook: Callable[[int], bool]) -> None:
    """Call ``hook(step)`` at every boundary from the next one on, until it returns True."""
    _hooks.append(hook)
