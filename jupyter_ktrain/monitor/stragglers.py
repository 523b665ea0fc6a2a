"""Stragglers, named: the rank whose steps take longest, from the times the ranks report them.

In data-parallel training every rank waits for the slowest at each collective, so the time
between two reports is the same on every rank; what differs is *when* in the step each rank
reports. A rank that reports a step (``ktrain.report(step=...)``, a Trainer log) after its
compute and before the step's collective reports it late by however much longer its compute
took. So a rank's compute time at step ``n`` is estimated as the time of its report of ``n``
less the last report of step ``n - 1`` (when the previous collective could end at the
earliest): :meth:`StepTimes.feed` gives those per rank, which the views plot as "step time".

The slowest rank is named when its estimate is at least ``ratio`` times the median of all
ranks' for ``run`` steps in a row (default 1.25x, 20 steps). A job that reports after its
collectives shows every rank alike and names nobody: that is all its reports can tell.

Times are the records' own (``t``, the rank's clock), so the cell and the side panel, which
read the same records, compute the same. Pure: no clock, no I/O.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

__all__ = ["STEP_TIME", "StepTimes", "Straggler"]

STEP_TIME = "step time (s)"  # the metric name of the per-rank estimates
_KEEP = 4096  # steps whose report times are kept (a reader may get one rank's steps first)


@dataclass(frozen=True)
class Straggler:
    """``rank`` took ``ratio`` x the median step time (``seconds`` against ``median``) for
    ``steps`` steps in a row, up to step ``step``."""

    rank: int
    seconds: float
    median: float
    ratio: float
    steps: int
    step: int


class StepTimes:
    """Each step's report times by rank, the per-rank step time estimates, the straggler."""

    def __init__(self, ratio: float = 1.25, run: int = 20) -> None:
        self.ratio = ratio
        self.run = run
        self._times: dict[int, dict[int, float]] = {}  # step -> rank -> report time
        self._ranks: set[int] = set()
        self._streak: tuple[int | None, int] = (None, 0)  # (rank, steps in a row)
        self._done: set[int] = set()  # steps already estimated
        self.straggler: Straggler | None = None

    def forget(self) -> None:
        """A new attempt: steps may be reported again."""
        self._times.clear()
        self._done.clear()
        self._streak = (None, 0)
        self.straggler = None

    def feed(self, rank: int, step: int, t: float, world: int | None = None) -> dict[int, float]:
        """Rank ``rank`` reported ``step`` at ``t``; returns the step time estimates that are
        now known (rank -> seconds), for this step when every rank has reported it: the
        job's ``world`` ranks, when known, else every rank seen so far (a reader that gets the
        lines node by node needs the first: it sees one node's ranks before the others')."""
        self._ranks.add(rank)
        self._times.setdefault(step, {}).setdefault(rank, t)
        if len(self._times) > _KEEP + _KEEP // 4:  # the oldest steps, a quarter at once (a
            # min() per report cost a 2-rank job's follower a fifth of its time per line)
            for old in sorted(self._times)[: len(self._times) - _KEEP]:
                del self._times[old]
                self._done.discard(old)
        ranks = max(world or 0, len(self._ranks))
        now = self._times[step]
        before = self._times.get(step - 1)
        if ranks < 2 or step in self._done or len(now) < ranks or not before:
            return {}
        if len(before) < ranks:
            return {}
        self._done.add(step)
        start = max(before.values())
        seconds = {r: max(0.0, at - start) for r, at in now.items()}
        self._judge(step, seconds)
        return seconds

    def _judge(self, step: int, seconds: dict[int, float]) -> None:
        if len(seconds) < 2:
            return
        median = statistics.median(seconds.values())
        slowest = max(seconds, key=lambda r: seconds[r])
        slow = median > 0 and seconds[slowest] >= self.ratio * median
        rank, count = self._streak
        count = count + 1 if slow and rank == slowest else (1 if slow else 0)
        self._streak = (slowest if slow else None, count)
        if count >= self.run:
            self.straggler = Straggler(
                slowest, seconds[slowest], median, seconds[slowest] / median, count, step
            )
        elif not slow or rank != slowest:
            self.straggler = None
