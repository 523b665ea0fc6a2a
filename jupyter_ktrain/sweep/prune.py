"""The median pruning rule (Optuna's ``MedianPruner``, over the trials that run now too): a
trial is stopped once, at some step at or after the warm-up, its objective is worse than the
median of the other trials' values at that same step, where at least :data:`MIN_OTHERS`
other trials reported it. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["MIN_OTHERS", "Pruned", "prune_at"]

MIN_OTHERS = 2  # others that reached the step before a trial is compared at it


@dataclass(frozen=True)
class Pruned:
    """Why a trial was stopped: its ``value`` at ``step`` was worse than ``median``."""

    step: int
    value: float
    median: float


def prune_at(
    mine: Mapping[int, float],
    others: Iterable[Mapping[int, float]],
    minimize: bool,
    after: int,
) -> Pruned | None:
    """The first step (``>= after``) at which ``mine`` (step -> value) is worse than the
    median of ``others`` (each another trial's step -> value) there; None when there is none."""
    others = list(others)
    for step in sorted(s for s in mine if s >= after):
        there = [o[step] for o in others if step in o]
        if len(there) < MIN_OTHERS:
            continue
        median = statistics.median(there)
        value = mine[step]
        if (value > median) if minimize else (value < median):
            return Pruned(step, value, median)
    return None
