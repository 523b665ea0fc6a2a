"""Comparing jobs, from their stored lines: each column's curves read from its job (or its
run of a warm job) and rebuilt into a monitor model as the side panel does, then put side by
side with the params the job store keeps (:func:`jupyter_ktrain.tracking.side_by_side.compared`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..backends.capabilities import job_shape, warm_capable
from ..errors import SpecError
from ..monitor.live import model_from_logs
from ..tracking.side_by_side import POINTS, Comparison, Entry, compared, entry

if TYPE_CHECKING:
    from ..backends.base import Backend

__all__ = ["compare_entries", "comparison"]


def _series(backend: Backend, entry: Entry) -> dict[str, tuple[list[float], list[float]]]:
    """Each metric name of the job (or run) -> rank 0's (or the lowest rank's) points."""
    name = entry.job
    shape = job_shape(backend, name)
    kind = shape.kind if shape else None
    lines = (
        warm_capable(backend, name).read_run_logs(name, entry.run)
        if entry.run is not None
        else backend.read_logs(name)
    )
    model = model_from_logs(name, lines, kind=kind, plot_points=POINTS)
    out: dict[str, tuple[list[float], list[float]]] = {}
    for rank, metric in sorted(model.metrics):
        if metric not in out:
            xs, ys = model.metrics[(rank, metric)].points(POINTS)
            out[metric] = (list(xs), list(ys))
    return out


def comparison(backend: Backend, names: Sequence[str], metric: str | None = None) -> Comparison:
    """The comparison of ``names`` (at least two jobs of ``backend``, or runs of its warm jobs:
    :func:`entry`) on ``metric`` (default: ``loss`` when every job has it, else the first name
    they all reported)."""
    if len(names) < 2:
        raise SpecError(
            "%ktrain compare needs two jobs or more, e.g. %ktrain compare A B (a warm job's "
            "runs: %ktrain compare A:1 A:2)."
        )
    return compare_entries(backend, [entry(name) for name in names], metric)


def compare_entries(
    backend: Backend, entries: Sequence[Entry], metric: str | None = None
) -> Comparison:
    """The comparison of ``entries`` (jobs or runs of ``backend``, labelled) on ``metric``."""
    series = {e.label: _series(backend, e) for e in entries}
    return compared(backend.name, entries, series, metric)
