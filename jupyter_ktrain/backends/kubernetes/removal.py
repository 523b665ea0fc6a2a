"""Cancelling and deleting a cluster job: the job is deleted (its pods and what it owns go with
it); ``delete`` also removes what is left and waits until nothing is. Either keeps the job's
history first: as it ended, or Cancelled as it was while it ran."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, ClusterError, JobNotFound
from ...kinds import KIND_TABLE
from .client.resources import POD, job_resource
from .client.retries import ApiFailure
from .cluster import Cluster
from .labels import JOB_LABEL
from .lookup import forget_kind, kind_of, stop_watch
from .objects import delete_job, delete_one
from .plans.scrape import metrics_service_name
from .status.cluster_history import ClusterHistory, cancelled
from .status.reader import JobStatuses

if TYPE_CHECKING:
    from .multikueue import Workers

__all__ = ["DELETE_WAIT_S", "Removal"]

DELETE_WAIT_S = 60.0


class Removal:
    """Cancels and deletes the jobs of the ``cluster`` context's namespace."""

    def __init__(
        self,
        cluster: Cluster,
        statuses: JobStatuses,
        history: ClusterHistory,
        workers: Workers | None = None,
    ) -> None:
        self.cluster = cluster
        self.statuses = statuses
        self.history = history
        self.workers = workers  # MultiKueue: the worker clusters a job may run on

    def cancel(self, name: str, keep: bool = True) -> None:
        """Delete the job (its pods and ConfigMap go with it); its history is kept. A job
        MultiKueue runs on a worker is kept as the worker ran it, and deleted on the manager:
        Kueue then deletes the worker's copy (deleted there, Kueue would dispatch it again)."""
        kind = kind_of(self.cluster, name)
        worker = self._worker(name)
        if worker is not None:
            worker.removal.keep(name, "a cancel")
        elif keep:
            self.keep(name, "a cancel")
        stop_watch(self.cluster, name)
        delete_job(self.cluster, kind, name, self.cluster.namespace)

    def delete(self, name: str, keep: bool = True) -> None:
        """Delete the job and everything it owns, and wait until nothing is left; its history
        is kept (``%ktrain delete --history`` removes it). A MultiKueue job: on the manager,
        then what is left of it on the worker."""
        cluster = self.cluster
        kind = kind_of(cluster, name)
        worker = self._worker(name)
        if worker is not None:
            worker.removal.keep(name, "%ktrain delete")
        elif keep:
            self.keep(name, "%ktrain delete")
        stop_watch(cluster, name)
        ns = cluster.namespace
        delete_job(cluster, kind, name, ns)
        delete_one(cluster, "ConfigMap", f"{name}-code", ns)
        delete_one(cluster, "Service", metrics_service_name(name), ns)
        with contextlib.suppress(ApiFailure):  # where it may not be deleted (RBAC)
            delete_one(cluster, "ServiceMonitor", metrics_service_name(name), ns)
        selector = {"labelSelector": f"{JOB_LABEL}={name}"}
        job_path = job_resource(KIND_TABLE[kind]).path(ns, name)
        deadline = time.monotonic() + DELETE_WAIT_S
        while True:
            left = cluster.api.items(POD.path(ns), selector)
            job_left = cluster.api.exists(job_path)
            if not left and not job_left:
                break
            if time.monotonic() > deadline:
                names = ", ".join(p["metadata"]["name"] for p in left)
                raise BackendError(
                    f"Job {name!r} was deleted but {names or 'the job object'} is still there "
                    f"after {DELETE_WAIT_S:.0f} s; check finalizers with kubectl describe."
                )
            for pod in left:
                delete_one(cluster, "Pod", pod["metadata"]["name"], ns)
            time.sleep(0.2)
        forget_kind(cluster, name)
        cluster.runtimes.forget(name)
        if worker is not None:
            with contextlib.suppress(JobNotFound):  # Kueue may have deleted it already
                worker.removal.delete(name, keep=False)
            delete_one(worker.cluster, "ConfigMap", f"{name}-code", ns)

    def _worker(self, name: str) -> Any:
        """The backend of the MultiKueue worker that runs job ``name``, where it is reached."""
        route = self.workers.route(name) if self.workers is not None else None
        return route.backend if route is not None else None

    def keep(self, name: str, by: str) -> None:
        """Before ``%ktrain cancel``/``delete`` (``by``) removes the job: keep it, as it ended,
        or Cancelled as it was while it ran."""
        try:
            status = self.statuses.status(name)  # an ended job is kept by this
        except (ClusterError, JobNotFound):
            return
        watch = self.cluster.watches.get(name)
        if status.terminal or status.from_history or watch is None or watch.job is None:
            return
        self.history.keep(watch.job, watch.pods, cancelled(status, by))
