"""A sweep's own MLflow run: the parent of its trials' runs.

Each trial is a job tracked as any job is (:mod:`~jupyter_ktrain.runner.track`: its params,
every point, its logs), its run tagged ``mlflow.parentRunId`` with this run's id and
``ktrain.sweep``, ``ktrain.trial`` (:func:`~jupyter_ktrain.runner.track.under`). This run is
made when the sweep starts, with what was searched as params (``space.NAME``: the distribution,
``objective``, ``search``, ``trials``, ``parallel``), and at the end gets the best trial: its
objective as the metric ``best/NAME``, its values as tags ``best.NAME`` and its number as
``best.trial``; and the sweep's state. A few requests a sweep, sent from the sweep's calling
thread; a tracking server that does not answer is one warning, and the trials are tracked
without a parent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..store.sweeps import SweepState
from .mlflow_run import _quiet_client, run_link

__all__ = ["SweepRun"]


class SweepRun:
    """The parent run of sweep ``name`` in ``experiment`` at ``uri``; ``run_id`` once made."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        name: str,
        backend: str,
        client_factory: Callable[[str], Any] = _quiet_client,
    ) -> None:
        self.uri, self.experiment, self.name, self.backend = uri, experiment, name, backend
        self.client_factory = client_factory
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.client: Any = None

    @property
    def link(self) -> str:
        return run_link(self.uri, self.experiment_id, self.run_id or "")

    def start(self, params: Mapping[str, str], say: Callable[[str], None]) -> None:
        """Make the run with ``params``; a server that refuses is said, and ``run_id`` stays
        None."""
        from mlflow.entities import Param

        try:
            self.client = client = self.client_factory(self.uri)
            exp = client.get_experiment_by_name(self.experiment)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(
                self.experiment
            )  # fmt: skip
            run = client.create_run(
                exp_id,
                start_time=int(time.time() * 1000),
                tags={"mlflow.runName": self.name, "ktrain.sweep": self.name,
                      "ktrain.backend": self.backend},
                run_name=self.name,
            )  # fmt: skip
            client.log_batch(
                run.info.run_id, params=[Param(k, v) for k, v in params.items()], synchronous=True
            )
        except Exception as exc:  # any failure: the server is down or refuses
            say(self._refused(exc))
            return
        self.run_id, self.experiment_id = run.info.run_id, exp_id

    def end(
        self,
        state: SweepState,
        metric: str,
        best: tuple[int, Mapping[str, Any], float] | None,
        say: Callable[[str], None],
    ) -> None:
        """The sweep ended in ``state`` (Done, Stopped, Interrupted); ``best``: the best
        trial's number, values and objective. Says where the run is."""
        from mlflow.entities import Metric, RunTag

        if self.run_id is None:
            return
        now = int(time.time() * 1000)
        tags = {"ktrain.state": str(state)}
        metrics = []
        if best is not None:
            number, values, objective = best
            tags.update({f"best.{k}": str(v) for k, v in values.items()})
            tags["best.trial"] = str(number)
            metrics.append(Metric(f"best/{metric}", float(objective), now, 0))
        status = "FINISHED" if state in (SweepState.DONE, SweepState.STOPPED) else "KILLED"
        try:
            self.client.log_batch(
                self.run_id,
                metrics=metrics,
                tags=[RunTag(k, v) for k, v in tags.items()],
                synchronous=True,
            )
            self.client.set_terminated(self.run_id, status=status, end_time=now)
        except Exception as exc:
            say(self._refused(exc))
            return
        say(f"MLflow: the sweep's run {self.link}, its trials' runs under it.")

    def _refused(self, exc: BaseException) -> str:
        why = " ".join(str(exc).split())[:300] or type(exc).__name__
        return (
            f"warning: MLflow at {self.uri} did not take the sweep's run ({why}); its trials "
            "are tracked without it."
        )
