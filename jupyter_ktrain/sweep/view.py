"""What a sweep's views show, from its record (:mod:`.record`, the one model): the header
(name, state, n of N trials done, the best so far), one row per trial (its values, state,
objective so far, job and run, a failed or pruned trial's reason, the best marked) and each
trial's objective over steps as one curve, downsampled. The cell's widget draws it as HTML;
the side panel gets it through the server (``/ktrain/api/sweeps/NAME``). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..jobs import SUCCEEDED, JobState
from ..monitor.downsample import minmax_lttb
from ..monitor.viewmodel import rank_colour, state_colour
from ..store.sweeps import SweepRecord, SweepState, TrialRow
from .record import INTERRUPTED, RUNNING, seen_state

__all__ = [
    "CURVE_POINTS",
    "CurveView",
    "RowView",
    "SweepView",
    "sweep_colour",
    "sweep_view",
    "value_text",
]

CURVE_POINTS = 500  # the most points of one trial's curve a view draws
_AS_JOB: dict[str, JobState] = {
    SweepState.DONE: JobState.SUCCEEDED,
    SweepState.STOPPED: JobState.FAILED,
    SweepState.INTERRUPTED: JobState.FAILED,
}


def sweep_colour(state: str) -> str:
    """A sweep's or a trial's state in a job state's colour (Done as Succeeded; Stopped and
    Interrupted, ended short, as Failed; Pruned as Pending)."""
    return state_colour(_AS_JOB.get(state, state))


@dataclass(frozen=True)
class RowView:
    """Trial ``number``'s row: ``params`` its values as text (in the view's ``names`` order),
    ``objective`` its value so far as text (``value`` the number), ``where`` its job (and run),
    ``reason`` why it failed or was pruned (one line), ``best`` whether it is the best so far,
    ``colour`` its curve's, ``state_colour`` its state's."""

    number: int
    params: tuple[str, ...]
    state: str
    objective: str
    value: float | None
    job: str
    run: int | None
    where: str
    reason: str
    best: bool
    colour: str
    state_colour: str


@dataclass(frozen=True)
class CurveView:
    """Trial ``number``'s objective over steps."""

    trial: int
    label: str
    colour: str
    x: tuple[float, ...]
    y: tuple[float, ...]


@dataclass(frozen=True)
class SweepView:
    """A sweep as its views show it (see the module docstring)."""

    name: str
    state: SweepState
    objective: str
    metric: str
    names: tuple[str, ...]
    done: int
    total: int
    running: int
    rows: tuple[RowView, ...]
    curves: tuple[CurveView, ...]

    @property
    def state_colour(self) -> str:
        return sweep_colour(self.state)

    @property
    def best(self) -> RowView | None:
        return next((r for r in self.rows if r.best), None)

    @property
    def best_text(self) -> str:
        """``trial 2, loss=0.05 (x=1)``, or what there is instead."""
        best = self.best
        if best is None:
            return "no trial succeeded yet" if self.state == RUNNING else "no trial succeeded"
        values = ", ".join(f"{n}={v}" for n, v in zip(self.names, best.params, strict=True))
        return f"trial {best.number}, {self.metric}={best.objective} ({values})"

    @property
    def header(self) -> str:
        """``Sweep 'gs' · Running · 2 of 4 trials done · best: trial 1, loss=0.05 (x=1)``."""
        going = f", {self.running} running" if self.running else ""
        return (
            f"Sweep {self.name!r} · {self.state} · {self.done} of {self.total} trials done"
            f"{going} · best: {self.best_text}"
        )


def value_text(value: Any) -> str:
    """A swept value or an objective for reading: ``0.000312``, ``16``, ``'adam'``, ``-``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _reason(error: str) -> str:
    line = error.strip().split("\n")[0]
    return line if len(line) <= 160 else line[:159] + "…"


def _row(row: TrialRow, names: tuple[str, ...], best: int | None, ended: bool) -> RowView:
    number, params, value, job, run, error = (
        row.number, row.params, row.objective, row.job, row.run, row.error
    )  # fmt: skip
    state: str = row.state
    if state == RUNNING and ended:  # its writer is gone: the trial was never seen to end
        state = INTERRUPTED
    return RowView(
        number, tuple(value_text(params.get(n)) for n in names), state, value_text(value),
        value, job, run, f"{job} run {run}" if run is not None else job,
        _reason(error) if state not in (RUNNING, SUCCEEDED) else "", number == best,
        rank_colour(number), sweep_colour(state),
    )  # fmt: skip


def _curve(number: int, points: Sequence[tuple[int, float]], limit: int) -> CurveView:
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    if len(xs) > limit:
        xs, ys = minmax_lttb(xs, ys, limit)
    return CurveView(number, f"trial {number}", rank_colour(number), tuple(xs), tuple(ys))


def sweep_view(record: SweepRecord, points: int = CURVE_POINTS) -> SweepView:
    """The view of sweep ``record`` as a reader sees it now (Interrupted once its writer is
    gone: see :func:`~.record.seen_state`); each curve at most ``points`` points."""
    state = seen_state(record)
    rows = record.rows
    names: list[str] = []
    for row in rows:  # the space's names, in the order the trials hold them
        names += [n for n in row.params if n not in names]
    if not names:
        names = [s.split("=", 1)[0] for s in record.space]
    objective = record.objective
    shown = tuple(_row(r, tuple(names), record.best, state != RUNNING) for r in rows)
    curves = sorted(record.curves.items())
    return SweepView(
        record.name, state, objective, objective.rsplit(":", 1)[0], tuple(names),
        sum(r.state != RUNNING for r in shown), record.trials or len(rows),
        sum(r.state == RUNNING for r in shown), shown,
        tuple(_curve(k, v, points) for k, v in curves),
    )  # fmt: skip
