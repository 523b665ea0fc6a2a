"""The panel's comparison of several jobs: :func:`~..runner.compare.comparison` (the data
``%ktrain compare`` prints) as a :class:`~.payloads.ComparePayload`, each curve downsampled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..monitor.downsample import minmax_lttb
from ..monitor.viewmodel import rank_colour
from ..runner.compare import comparison
from .payloads import CompareCurve, CompareParam, ComparePayload

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["compare_payload"]


def compare_payload(
    name: str, backend: Backend, jobs: Sequence[str], metric: str | None, points: int
) -> ComparePayload:
    """``jobs`` of ``backend`` (named ``name``) compared on ``metric`` (None: the default
    :func:`comparison` picks); SpecError as :func:`comparison` raises it."""
    c = comparison(backend, jobs, metric)
    curves: list[CompareCurve] = []
    for k, job in enumerate(c.jobs):
        if job not in c.curves:
            continue
        xs, ys = downsample(*c.curves[job], points)
        curves.append(
            {"job": job, "colour": rank_colour(k), "x": xs, "y": ys, "last": c.last.get(job)}
        )
    differ: list[CompareParam] = [{"name": k, "values": v} for k, v in c.differ.items()]
    return {
        "backend": name,
        "metric": c.metric,
        "metrics": c.metrics,
        "jobs": c.jobs,
        "curves": curves,
        "differ": differ,
    }


def downsample(xs: list[float], ys: list[float], points: int) -> tuple[list[float], list[float]]:
    if len(xs) <= points:
        return xs, ys
    return minmax_lttb(xs, ys, points)
