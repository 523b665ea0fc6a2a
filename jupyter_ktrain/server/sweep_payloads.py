"""The side panel's sweeps: each sweep's record in the job store
(:func:`jupyter_ktrain.sweep.sweep_verbs.records`) as its :class:`~.payloads.SweepSummary`
(the list) and :class:`~.payloads.SweepDetail` (its tab), through the view the cell's widget draws
(:func:`jupyter_ktrain.sweep.view.sweep_view`), so the two show the same."""

from __future__ import annotations

from ..sweep import sweep_verbs
from ..sweep.record import SweepRecord
from ..sweep.view import RowView, SweepView, sweep_view
from .payloads import SweepCurve, SweepDetail, SweepRowPayload, SweepsPayload, SweepSummary

__all__ = ["sweep_detail", "sweep_payload", "sweep_summary", "sweeps_payload"]


def sweep_summary(record: SweepRecord, view: SweepView | None = None) -> SweepSummary:
    """A record's row in the panel's list."""
    view = view or sweep_view(record)
    best = view.best
    return {
        "name": view.name, "backend": record.backend, "state": view.state,
        "state_colour": view.state_colour,
        "objective": view.objective, "done": view.done, "total": view.total,
        "running": view.running, "best": best.number if best else None,
        "best_objective": best.value if best else None, "best_text": view.best_text,
        "started": record.started, "ended": record.ended,
    }  # fmt: skip


def _row(r: RowView) -> SweepRowPayload:
    return {
        "number": r.number, "params": list(r.params), "state": r.state,
        "state_colour": r.state_colour,
        "objective": r.objective, "value": r.value, "job": r.job, "run": r.run,
        "where": r.where, "reason": r.reason, "best": r.best, "colour": r.colour,
    }  # fmt: skip


def sweep_detail(record: SweepRecord, points: int) -> SweepDetail:
    """A record as its tab shows it, each curve at most ``points`` points."""
    view = sweep_view(record, points)
    rows = [_row(r) for r in view.rows]
    curves: list[SweepCurve] = [
        {"trial": c.trial, "label": c.label, "colour": c.colour, "x": list(c.x), "y": list(c.y)}
        for c in view.curves
    ]
    return {
        **sweep_summary(record, view),
        "header": view.header, "metric": view.metric, "names": list(view.names),
        "space": list(record.space), "search": record.search, "parallel": record.parallel,
        "warm": record.warm, "rows": rows, "curves": curves,
    }  # fmt: skip


def sweeps_payload() -> SweepsPayload:
    """Every sweep of the job store, newest first."""
    return {"sweeps": [sweep_summary(r) for r in sweep_verbs.records()]}


def sweep_payload(name: str, points: int) -> SweepDetail:
    """Sweep ``name``'s detail; JobNotFound (404) when the store has none of that name."""
    return sweep_detail(sweep_verbs.record(name), points)
