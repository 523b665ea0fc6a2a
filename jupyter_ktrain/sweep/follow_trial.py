"""Following one trial's job to its end, headless: the objective as the job reports it
(``ktrain.report``'s records in its lines, from its lowest reporting rank), the median rule
against the other trials on the sweep's :class:`Board` at each poll (a trial it names is
cancelled and ends Pruned), and the :class:`~.trials.Trial` it ended as. A job tracked in
MLflow is logged as the cell logs a job it follows (:mod:`~..runner.track`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import KtrainError
from ..jobs import CANCELLED as JOB_CANCELLED
from ..jobs import SUCCEEDED as JOB_SUCCEEDED
from ..jobs import TrialState
from ..monitor.cell_error import job_error
from ..monitor.follow_loop import follow
from ..pod.protocol import LogLine, Metric
from ..runner import track as tracking
from ..sweep_spec.objective import Objective, as_number
from .prune import Pruned, prune_at
from .trials import CANCELLED, FAILED, PRUNED, SUCCEEDED, Trial

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import JobStatus

__all__ = ["Board", "follow_trial"]


class Board:
    """Every trial's objective by step, so far (shared by the slots' threads), and the rule
    that prunes: ``prune_after`` warm-up steps (None: no pruning)."""

    def __init__(self, objective: Objective, prune_after: int | None) -> None:
        self.objective = objective
        self.prune_after = None if objective.of_result else prune_after
        self.lock = threading.Lock()
        self.values: dict[int, dict[int, float]] = {}

    def add(self, trial: int, step: int, value: float) -> None:
        with self.lock:
            self.values.setdefault(trial, {})[step] = value

    def last(self, trial: int) -> float | None:
        with self.lock:
            mine = self.values.get(trial)
            return mine[max(mine)] if mine else None

    def curves(self) -> dict[int, dict[int, float]]:
        """Every trial's objective by step, a copy."""
        with self.lock:
            return {trial: dict(values) for trial, values in self.values.items()}

    def steps(self, trial: int) -> int:
        with self.lock:
            return len(self.values.get(trial, ()))

    def pruned(self, trial: int) -> Pruned | None:
        """The median rule for ``trial`` now; None when it goes on."""
        if self.prune_after is None:
            return None
        with self.lock:
            mine = dict(self.values.get(trial, {}))
            others = [dict(v) for k, v in self.values.items() if k != trial]
        return prune_at(mine, others, self.objective.minimize, self.prune_after)


class _TrialSink:
    """The follow loop's sink for one trial: reads its metric records, prunes it."""

    def __init__(self, number: int, job: Job, board: Board) -> None:
        self.number, self.job, self.board = number, job, board
        self.rank: int | None = None  # the lowest rank that reported the objective
        self.verdict: Pruned | None = None

    def lines(self, replica: str, lines: list[LogLine]) -> None:
        name = self.board.objective.name
        for line in lines:
            record = line.typed
            if not isinstance(record, Metric) or name not in record.values:
                continue
            rank = line.rank if line.rank is not None else record.rank
            if rank is None or (self.rank is not None and rank > self.rank):
                continue
            if self.rank is None or rank < self.rank:
                self.rank = rank
            step = record.step if record.step is not None else self.board.steps(self.number)
            value = as_number(record.values[name])
            if value is not None:
                self.board.add(self.number, step, value)

    def status(self, status: JobStatus) -> None:
        return None

    def tick(self) -> None:
        if self.verdict is not None:
            return
        self.verdict = self.board.pruned(self.number)
        if self.verdict is not None:
            self.job.cancel()


def follow_trial(
    number: int,
    params: Mapping[str, Any],
    job: Job,
    board: Board,
    objective: Objective,
    say: Callable[[str], None] = print,
) -> Trial:
    """Follow trial ``number``'s ``job`` to its end: the trial as it ended (what tracking
    has to say goes to ``say``)."""
    sink = _TrialSink(number, job, board)
    tracked = tracking.sink_for(job, sink, say)  # MLflow, when the job's record says so
    status = follow(job, tracked, interval=0.1)
    tracking.finished(tracked, job, status, say)
    last = board.last(number)

    def ended(state: TrialState, value: float | None, error: str = "") -> Trial:
        return Trial(number, params, state, value, job.name, job.run, error, job)

    if sink.verdict is not None:
        v = sink.verdict
        why = (
            f"pruned at step {v.step}: {objective.name}={v.value:.6g}, worse than the other "
            f"trials' median {v.median:.6g}"
        )
        # its value where it was pruned, as ``why`` says: the lines read after the verdict (until
        # the cancel took) are steps the rule never compared
        return ended(PRUNED, v.value, why)
    if status.state == JOB_SUCCEEDED:
        value, error = _objective(job, objective, last)
        return ended(SUCCEEDED, value) if value is not None else ended(FAILED, None, error)
    state = CANCELLED if status.state == JOB_CANCELLED else FAILED
    return ended(state, last, job_error(job, status).headline)


def _objective(job: Job, objective: Objective, last: float | None) -> tuple[float | None, str]:
    """A succeeded trial's objective, or why it has none."""
    if not objective.of_result:
        if last is None:
            return None, (
                f"it reported no {objective.name!r}: report it with "
                f"ktrain.report(step=..., {objective.name}=...)"
            )
        return last, ""
    try:
        value = job.result
    except (KtrainError, OSError, ValueError, ImportError, AttributeError) as exc:
        return None, f"its result could not be read ({exc})"
    number = as_number(value)
    if number is None:
        return None, f"the cell's value {value!r:.60} is not a number (--objective result)"
    return number, ""
