"""The side panel's sweeps: each sweep's record in the job store
(:func:`jupyter_ktrain.sweep.verbs.records`) as its :class:`~.payloads.SweepSummary` (the list) and
:class:`~.payloads.SweepDetail` (its tab), through the view the cell's widget draws
(:func:`jupyter_ktrain.sweep.view.sweep_view`), so the two show the same."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sweep import verbs
from ..sweep.view import RowView, SweepView, sweep_view
from .payloads import SweepCurve, SweepDetail, SweepRowPayload, SweepsPayload, SweepSummary

__all__ = ["sweep_detail", "sweep_payload", "sweep_summary", "sweeps_payload"]


def sweep_summary(record: Mapping[str, Any], view: SweepView | None = None) -> SweepSummary:
    """A record's row in the panel's list."""
    view = view or sweep_view(record)
    best = view.best
    return {
        "name": view.name, "backend": str(record.get("backend") or ""), "state": view.state,
        "state_colour": view.state_colour,
        "objective": view.objective, "done": view.done, "total": view.total,
        "running": view.running, "best": best.number if best else None,
        "best_objective": best.value if best else None, "best_text": view.best_text,
        "started": float(record.get("started") or 0.0), "ended": record.get("ended"),
    }  # fmt: skip


def _row(r: RowView) -> SweepRowPayload:
    return {
        "number": r.number, "params": list(r.params), "state": r.state,
        "state_colour": r.state_colour,
        "objective": r.objective, "value": r.value, "job": r.job, "run": r.run,
        "where": r.where, "reason": r.reason, "best": r.best, "colour": r.colour,
    }  # fmt: skip


def sweep_detail(record: Mapping[str, Any], points: int) -> SweepDetail:
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
        "space": [str(s) for s in record.get("space") or []],
        "search": str(record.get("search") or ""), "parallel": int(record.get("parallel") or 1),
        "warm": bool(record.get("warm")), "rows": rows, "curves": curves,
    }  # fmt: skip


def sweeps_payload() -> SweepsPayload:
    """Every sweep of the job store, newest first."""
    return {"sweeps": [sweep_summary(r) for r in verbs.records()]}


def sweep_payload(name: str, points: int) -> SweepDetail:
    """Sweep ``name``'s detail; JobNotFound (404) when the store has none of that name."""
    return sweep_detail(verbs.record(name), points)
