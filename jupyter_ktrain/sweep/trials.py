"""A sweep's results: each :class:`Trial` (its values, how it ended, its objective, its job)
and the :class:`Sweep` (``.trials``, ``.best``, a table as its text), and the lines said while
it runs. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..jobs import TrialState
from ..sweep_spec.objective import Objective

if TYPE_CHECKING:
    from ..backends.base import Job

__all__ = ["CANCELLED", "FAILED", "PRUNED", "SUCCEEDED", "Sweep", "Trial", "params_text"]

SUCCEEDED, FAILED, PRUNED, CANCELLED = (
    TrialState.SUCCEEDED,
    TrialState.FAILED,
    TrialState.PRUNED,
    TrialState.CANCELLED,
)


@dataclass(frozen=True)
class Trial:
    """Trial ``number``: the swept names' ``params``, its ``state`` (Succeeded, Failed, Pruned,
    Cancelled), its ``objective`` (a pruned trial's: its value at the step it was pruned at, as
    ``error`` says), the ``job`` it ran as (``run``: its run there, on a warm job), ``error``:
    why it failed or was pruned (one line); ``handle``: the
    :class:`~jupyter_ktrain.backends.base.Job` (logs, result)."""

    number: int
    params: Mapping[str, Any]
    state: TrialState
    objective: float | None = None
    job: str = ""
    run: int | None = None
    error: str = ""
    handle: Job | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.state, TrialState):  # a word (a record's, a caller's)
            object.__setattr__(self, "state", TrialState(self.state))

    @property
    def where(self) -> str:
        return f"{self.job} run {self.run}" if self.run is not None else self.job


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def params_text(params: Mapping[str, Any]) -> str:
    """``lr=0.000312, batch=16``."""
    return ", ".join(
        f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v!r}" for k, v in params.items()
    )


@dataclass(frozen=True)
class Sweep:
    """What a sweep returns: its ``name``, the ``objective`` and every trial, in number order."""

    name: str
    objective: Objective
    trials: Sequence[Trial] = ()

    @property
    def best(self) -> Trial | None:
        """The succeeded trial with the best objective (the first of equals); None if none."""
        return best_of(self.trials, self.objective)

    def table(self) -> str:
        """Every trial, one a row, and which is best."""
        names = list(self.trials[0].params) if self.trials else []
        head = ["trial", *names, str(self.objective), "state", "job"]
        rows = [
            [str(t.number), *(_cell(t.params.get(n)) for n in names), _value(t.objective),
             t.state, t.where]
            for t in self.trials
        ]  # fmt: skip
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                 for r in [head, *rows]]  # fmt: skip
        best = self.best
        counts = {s: sum(t.state == s for t in self.trials) for s in (SUCCEEDED, PRUNED, FAILED,
                                                                     CANCELLED)}  # fmt: skip
        tally = ", ".join(f"{n} {s.lower()}" for s, n in counts.items() if n)
        end = (
            f"best: trial {best.number}, {self.objective.name}={_value(best.objective)} "
            f"({params_text(best.params)})"
            if best is not None
            else "no trial succeeded"
        )
        return "\n".join([f"Sweep {self.name!r}: {tally or 'no trial'}; {end}", *lines])

    def __repr__(self) -> str:
        best = self.best
        told = (
            f"best trial {best.number}, {self.objective.name}={_value(best.objective)}"
            if best is not None
            else "no trial succeeded"
        )
        return f"<ktrain Sweep {self.name!r}: {len(self.trials)} trial(s), {told}; .table()>"


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_of(trials: Sequence[Trial], objective: Objective) -> Trial | None:
    best: Trial | None = None
    for trial in trials:
        if trial.state != SUCCEEDED or trial.objective is None:
            continue
        if (
            best is None
            or best.objective is None
            or objective.better(trial.objective, best.objective)
        ):
            best = trial
    return best
