"""A sweep tracked in MLflow (``--mlflow`` or ``%ktrain config mlflow=URI``): its own run,
the parent of its trials' runs (:class:`~..tracking.sweep_run.SweepRun`), made when the
sweep starts and given the best trial at its end; each trial's job tracked as any job is,
its run tagged under the parent (:func:`~..runner.track.under`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import Job
from ..runner import track as tracking
from ..store.sweeps import SweepState
from ..sweep_spec.sweep_options import SweepOptions
from ..tracking.sweep_run import SweepRun
from .trials import Sweep

__all__ = ["end_parent", "start_parent", "trial_under"]


def start_parent(
    where: tuple[str, str] | None,
    name: str,
    backend: str,
    sweep: SweepOptions,
    say: Callable[[str], None],
) -> SweepRun | None:
    """The sweep's parent run, made now (None when the sweep is not tracked)."""
    if where is None:
        return None
    run = SweepRun(where[0], where[1], name, backend)
    params = {f"space.{p.name}": str(p).split("=", 1)[1] for p in sweep.params}
    params.update(
        objective=str(sweep.objective), search=sweep.search, trials=str(sweep.trials),
        parallel=str(sweep.parallel),
    )  # fmt: skip
    run.start(params, say)
    return run


def trial_under(parent: SweepRun | None, job: Job, name: str, number: int) -> None:
    """Trial ``number``'s job, just scheduled: its run is to be a child of ``parent``'s."""
    if parent is None or parent.run_id is None:
        return
    tags = {"mlflow.parentRunId": parent.run_id, "ktrain.sweep": name,
            "ktrain.trial": str(number)}  # fmt: skip
    tracking.under(job, tags)


def end_parent(
    parent: SweepRun | None, state: SweepState, result: Sweep, say: Callable[[str], None]
) -> None:
    """The sweep ended in ``state``: the best trial to the parent run, which ends."""
    if parent is None:
        return
    best = result.best
    told = None
    if best is not None and best.objective is not None:
        told = (best.number, best.params, best.objective)
    parent.end(state, result.objective.name, told, say)
