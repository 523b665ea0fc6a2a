"""torchrun's rendezvous without its one-second polls.

torch's dynamic (``c10d``) rendezvous, which every multi-node job's torchrun runs, waits for the
other nodes by polling the store once a second (``_Action.SYNC`` in
``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py``: ``_delay(seconds=1)``), and
skews each node's first join by a random 0-0.3 s. A node that joined before the last one
learns that the rendezvous completed up to a second late: 0-1 s (0.5 s on average) of every
job's start, and of every restart's new round, spent asleep. :func:`quicken` makes the poll
:data:`POLL_S` and the skew at most :data:`SKEW_S` in the torchrun process the agent starts
(forked from the node's fork server or not); each poll is one read of the store's state, so at
:data:`POLL_S` a 512-node job's joins cost the store about 5,000 reads a second while they
wait, which it serves. Where torch has no such function (another version), nothing changes.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["POLL_S", "SKEW_S", "quicken"]

POLL_S = 0.1  # the wait between two reads of the rendezvous state (torch: 1 s)
SKEW_S = (0.0, 0.05)  # each node's random delay before its first join (torch: 0-0.3 s)
_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


def quicken(module: str) -> None:
    """In a process about to run ``module`` (``torch.distributed.run``: torchrun), the
    rendezvous polls every :data:`POLL_S`; any other module is left alone."""
    if module not in _LAUNCHERS:
        return
    try:  # torchrun's own module: its process has torch (the pod package never imports it)
        rdzv: Any = importlib.import_module(
            "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
        )
    except ImportError:
        return
    slow = getattr(rdzv, "_delay", None)
    if slow is None or getattr(slow, "quickened", False):
        return

    def _delay(seconds: Any) -> None:
        if seconds == 1:  # the poll while other nodes are awaited
            seconds = POLL_S
        elif isinstance(seconds, tuple) and seconds == (0, 0.3):  # the first join's skew
            seconds = SKEW_S
        slow(seconds=seconds)

    _delay.quickened = True  # type: ignore[attr-defined]
    rdzv._delay = _delay
