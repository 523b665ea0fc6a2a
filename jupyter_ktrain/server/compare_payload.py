"""The panel's comparison of several jobs: the service's (:func:`~..runner.verbs.compare`,
the data ``%ktrain compare`` prints) as a :class:`~.payloads.ComparePayload`, each curve
downsampled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..monitor.downsample import minmax_lttb
from ..monitor.viewmodel import rank_colour
from .payloads import CompareCurve, CompareParam, ComparePayload

if TYPE_CHECKING:
    from ..tracking.side_by_side import Comparison

__all__ = ["compare_payload"]


def compare_payload(name: str, c: Comparison, points: int) -> ComparePayload:
    """The comparison ``c`` of jobs of backend ``name`` (:func:`~..runner.verbs.compare`) as
    the panel shows it, each curve down to ``points``."""
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
