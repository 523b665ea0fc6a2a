"""The search, by Optuna's samplers in its ask-and-tell form: :class:`Search` asks for the next
trial's values and is told how each trial ended. Grid (``GridSampler``: every point, each
once), random (``RandomSampler``) or model-based (``TPESampler``, with ``constant_liar`` so
trials that run at once are not all asked the same). Thread-safe: the sweep's slots ask and
tell from their own threads.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.study import StudyDirection
from optuna.trial import TrialState

from ..jobs import TrialState as Ended
from ..sweep_spec.space import Param
from ..sweep_spec.sweep_options import SweepOptions

__all__ = ["Search"]

_STATES = {Ended.SUCCEEDED: TrialState.COMPLETE, Ended.PRUNED: TrialState.PRUNED}


def _distribution(param: Param) -> BaseDistribution:
    if param.kind == "choice":
        return CategoricalDistribution(param.choices)
    if param.kind == "int":
        return IntDistribution(int(param.low), int(param.high))
    return FloatDistribution(param.low, param.high, log=param.kind == "loguniform")


class _Grid(optuna.samplers.GridSampler):
    """Optuna's grid, asked and told: the sweep runs as many trials as the grid has points
    itself, so the last trial told does not stop the study (``Study.stop`` is refused outside
    ``Study.optimize``)."""

    def after_trial(self, *args: Any, **kwargs: Any) -> None:
        return None


def _sampler(options: SweepOptions, seed: int | None) -> optuna.samplers.BaseSampler:
    if options.search == "grid":
        return _Grid({p.name: p.values() for p in options.params}, seed)
    if options.search == "random":
        return optuna.samplers.RandomSampler(seed)
    startup = max(2, min(10, options.trials // 3))  # random trials before the model guides
    with warnings.catch_warnings():  # experimental in Optuna 4, the default in 5
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(n_startup_trials=startup, seed=seed, constant_liar=True)


class Search:
    """One study, in memory, for one sweep."""

    def __init__(self, options: SweepOptions, seed: int | None = None) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweep says what happens
        self.params = options.params
        direction = (
            StudyDirection.MINIMIZE if options.objective.minimize else StudyDirection.MAXIMIZE
        )
        self.study = optuna.create_study(direction=direction, sampler=_sampler(options, seed))
        self.fixed = {p.name: _distribution(p) for p in options.params}
        self.lock = threading.Lock()
        self.asked: dict[int, optuna.trial.Trial] = {}

    def ask(self) -> tuple[int, dict[str, Any]]:
        """The next trial: its number and the values of the swept names."""
        with self.lock:
            trial = self.study.ask(self.fixed)
            self.asked[trial.number] = trial
            return trial.number, {p.name: trial.params[p.name] for p in self.params}

    def tell(self, number: int, state: Ended, objective: float | None) -> None:
        """Trial ``number`` ended ``state`` (Succeeded with its objective, Pruned, Failed or
        Cancelled: the last two teach the sampler nothing)."""
        with self.lock:
            trial = self.asked.pop(number)
            done = _STATES.get(state, TrialState.FAIL)
            if done == TrialState.COMPLETE and objective is not None:
                self.study.tell(trial, objective)
            else:  # a trial that succeeded without an objective counts as failed
                failed = TrialState.FAIL if done == TrialState.COMPLETE else done
                self.study.tell(trial, state=failed)
