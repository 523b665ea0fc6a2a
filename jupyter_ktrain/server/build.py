"""The panel's wire payloads (:mod:`.payloads`) built from the job vocabulary itself.

Each payload comes from the one core type it shows (:class:`~jupyter_ktrain.jobs.JobStatus`,
:class:`~jupyter_ktrain.jobs.ReplicaStatus`, :class:`~jupyter_ktrain.jobs.WarmInfo`, the
monitor's model) by one function here, worded as every other view words it
(:mod:`jupyter_ktrain.words`): no class mirrors those types on the Python side.
Pure: no backend, no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import words
from ..monitor.glance import RANK_FILTER_RANKS
from ..monitor.viewmodel import (
    NOTICES,
    fmt_value,
    job_state,
    plot_panels,
    rank_band,
    summary_values,
)
from .payloads import (
    GpuHeatmap,
    JobDetail,
    JobSummary,
    MetricPanel,
    MetricsPayload,
    MetricTrace,
    ProgressPayload,
    ReplicaPayload,
    SummaryPayload,
    WarmPayload,
)

if TYPE_CHECKING:
    from ..jobs import JobStatus, ReplicaStatus
    from ..monitor.glance import GpuGrid
    from ..monitor.model import MonitorModel
    from ..words import StatusWords

__all__ = [
    "heatmap_payload",
    "job_detail",
    "job_summary",
    "metrics_payload",
    "progress_payload",
    "replica_payload",
    "warm_payload",
]


def job_summary(status: JobStatus, backend: str, now: float) -> JobSummary:
    """One job's row, worded as every view words it (:func:`jupyter_ktrain.words.status_words`)."""
    started = status.started
    said = words.status_words(status, now)
    return {
        "name": status.name,
        "backend": backend,
        "state": job_state(status.state),
        "reason": status.reason,
        "message": status.message,
        "started": started,
        "finished": status.finished,
        "age_s": None if started is None else round(max(0.0, now - started), 1),
        "progress": progress_payload(status, said, now),
        "warm": warm_payload(status, said, now),
        "history": status.from_history,
    }


def warm_payload(status: JobStatus, said: StatusWords, now: float) -> WarmPayload | None:
    w = status.warm
    if w is None or said.warm is None:
        return None
    return {
        "runs": w.runs,
        "active": w.active,
        "idle_s": round(w.idle_s(now), 1),
        "idle_limit_s": w.idle_limit_s,
        "gpus": w.gpus,
        "idle_gpu_hours": round(w.idle_gpu_hours(now), 4),
        "text": said.warm[0],
        "short": said.warm[1],
    }


def progress_payload(status: JobStatus, said: StatusWords, now: float) -> ProgressPayload | None:
    p = status.progress
    if p is None or said.progress is None:
        return None
    left = None if status.terminal or said.restarting else p.remaining(now)
    return {
        "step": p.step,
        "done": p.steps_done,
        "total": p.total,
        "percent": p.percent,
        "eta_s": None if left is None else round(left, 1),
        "text": said.progress[0],
        "short": said.progress[1],
    }


def replica_payload(r: ReplicaStatus, max_restarts: int | None) -> ReplicaPayload:
    """One replica on the wire; ``restart_text``: its last restart as the cell and the widget
    say it (``""`` if none), counted against the job's ``max_restarts``."""
    return {
        "name": r.name,
        "phase": r.phase,
        "restarts": r.restarts,
        "node": r.node,
        "exit_code": r.exit_code,
        "last_event": r.last_event,
        "restart_text": words.replica_restart_text(r, max_restarts),
    }


def job_detail(status: JobStatus, backend: str, now: float, failure: str | None) -> JobDetail:
    """The summary plus replicas, per-rank exit codes and ``failure``: what the cell says of
    a failed or cancelled job (None for any other)."""
    return {
        **job_summary(status, backend, now),
        "replicas": [replica_payload(r, status.max_restarts) for r in status.replicas],
        "exit_codes": {str(k): v for k, v in sorted(status.exit_codes.items())},
        "failed_rank": status.failed_rank,
        "terminal": status.terminal,
        "failure": failure,
    }


BAND_RANKS = RANK_FILTER_RANKS  # from this many ranks up, a metric panel is a band
BAND_COLOUR = "#888888"


def metrics_payload(model: MonitorModel, points: int) -> MetricsPayload:
    """The view-model's panels (:func:`~jupyter_ktrain.monitor.viewmodel.plot_panels`) and
    values reported once, downsampled to ``points`` per trace, as the panel draws them. A
    metric reported by :data:`BAND_RANKS` ranks or more is the band of every rank (its min,
    median and max) and the lines of the ranks the log starts with (rank 0 and the ranks that
    warned): a poll's bytes stay those of a few lines, not one line per rank (a 512-rank job
    made 0.5 MB a poll after 10 s, growing to tens of MB)."""
    panels: list[MetricPanel] = []
    shown = set(model.start_ranks() or ())
    for panel in plot_panels(model):
        key = panel.key
        traces: list[MetricTrace] = []
        banded = key.kind == "metric" and len(panel.traces) >= BAND_RANKS
        if banded:
            traces += [
                {"label": b.label, "colour": BAND_COLOUR, "x": list(b.x), "y": list(b.y)}
                for b in rank_band(panel.traces, points)
            ]
        for t in panel.traces:
            if banded and t.who not in shown:
                continue
            xs, ys = t.series.points(points)
            traces.append({"label": t.label, "colour": t.colour, "x": list(xs), "y": list(ys)})
        panels.append(
            {
                "key": key.id,
                "name": key.name,
                "title": key.title,
                "x_title": key.x_title,
                "traces": traces,
                "markers": [{"x": m.x, "text": m.text} for m in panel.markers],
            }
        )
    values: list[SummaryPayload] = [
        {"name": v.name, "value": v.value, "text": fmt_value(v.value), "rank": v.rank}
        for v in summary_values(model)
    ]
    start = model.start_ranks()
    alerts = model.alerts()
    notices = [a.message for a in alerts if a.code in NOTICES]
    warnings = [a.message for a in alerts if a.code not in NOTICES]
    return {
        "panels": panels,
        "heatmaps": [heatmap_payload(g) for g in model.gpu_grids()],
        "log_ranks": sorted(model.ranks),
        "log_start": None if start is None else list(start),
        "log_flagged": {str(r): level for r, level in sorted(model.flagged.items())},
        "values": values,
        "notices": notices,
        "warnings": warnings,
        "stacks": "",
        "profile": None,
        "version": model.version,
    }


def heatmap_payload(grid: GpuGrid) -> GpuHeatmap:
    """One field's heatmap (:func:`~jupyter_ktrain.monitor.glance.gpu_grid`) on the wire."""
    return {
        "field": grid.field,
        "title": grid.title,
        "gpus": list(grid.gpus),
        "rows": [
            {
                "node": row.node,
                "name": row.name,
                "cells": [
                    {
                        "gpu": c.gpu,
                        "value": c.value,
                        "label": c.label,
                        "colour": c.colour,
                        "mark": c.mark,
                        "title": c.title,
                    }
                    for c in row.cells
                ],
            }
            for row in grid.rows
        ],
        "top": grid.top,
        "idle": grid.idle,
        "hot": grid.hot,
    }
