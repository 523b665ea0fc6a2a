"""A cluster job's status, from its watch (:mod:`.watch`) and what its logs told
(:class:`~.job_runtime.JobRuntime`), built by :func:`.status.build_status`; an ended job's is
kept in its history, and answered from there once its objects are gone."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ....errors import ClusterError, JobNotFound
from ....jobs import FAILED, JobShape, JobStatus, complete_exit_codes
from ....kinds import job_kind
from ....pod.protocol import EXIT, parse_line, record_type
from ..client.fields import labels_of
from ..cluster import Cluster
from ..labels import WARM_LABEL
from ..logs.pod import split_stamped
from ..logs.stored import stored_logs
from ..lookup import forget_kind, stop_watch, watch
from ..warm.ledger import WarmLedger
from .cluster_history import ClusterHistory
from .derive import build_status, job_shape, job_state
from .watch import JobWatch


def on_cluster(where: str, message: str) -> str:
    """The message of a job that runs on MultiKueue worker cluster ``where``."""
    return f"on cluster {where!r}" + (f"; {message}" if message else "")


if TYPE_CHECKING:
    from ..multikueue import Workers

__all__ = ["JobStatuses"]


class JobStatuses:
    """The statuses of the jobs in the ``cluster`` context's namespace."""

    def __init__(
        self,
        cluster: Cluster,
        history: ClusterHistory,
        ledger: WarmLedger,
        workers: Workers | None = None,
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.ledger = ledger
        self.workers = workers  # MultiKueue: the worker clusters a job may run on

    def status(self, name: str) -> JobStatus:
        """The job's status; once its objects are gone, the one kept in its history."""
        try:
            found = watch(self.cluster, name)
        except JobNotFound as exc:
            return self.history.gone(name, exc).status
        job = found.job
        if job is None:
            stop_watch(self.cluster, name)
            forget_kind(self.cluster, name)
            ns = self.cluster.namespace
            gone = JobNotFound(f"Job {name!r} is gone from namespace {ns!r}.")
            return self.history.gone(name, gone).status
        route = self.workers.route(name) if self.workers is not None else None
        if route is not None and route.backend is not None:
            with contextlib.suppress(JobNotFound, ClusterError):  # gone there: the mirror
                status: JobStatus = route.backend.statuses.status(name)
                return replace(status, message=on_cluster(route.where, status.message))
        status = self._live(name, found, job)
        if route is not None:  # the manager's mirror of the worker's job: no pods here
            status = replace(status, message=on_cluster(route.where, status.message))
        if status.terminal and (route is None or route.backend is None):
            self.history.keep(job, found.pods, status)
        return status

    def _live(self, name: str, found: JobWatch, job: dict[str, Any]) -> JobStatus:
        rt = self.cluster.runtimes.of(name)
        if job_state(job)[0] == FAILED and not rt.loaded:
            # the operator may declare the job Failed before the followed streams reached
            # every rank's exit record: read them from the stored logs once, with the kubelet's
            # times (they decide who failed first); lines already followed are not fed twice
            rt.loaded = True
            followed = bool(rt.exits)
            with contextlib.suppress(ClusterError):
                for pod, raw in stored_logs(self.cluster, job, found.pods, stamped=True):
                    parsed = split_stamped(raw.encode())
                    ts, line = parsed if parsed is not None else (0, raw)
                    record = parse_line(line).record if followed else None
                    if not followed or record_type(record) == EXIT:
                        rt.on_line(pod, ts, line)
        workload = found.workload
        position = self.cluster.queue.position(self.cluster.api, self.cluster.namespace, workload)
        with rt.lock:
            status = build_status(
                job,
                found.pods,
                found.events,
                dict(rt.exits),
                {r: list(t) for r, t in rt.tails.items()},
                dict(found.recreated),
                rt.last_progress,
                progress=rt.progress.progress,
                recreations=dict(found.recreations),
                last_exits=dict(found.last_exit),
                workload=workload,
                queue_position=position,
                deleted=dict(found.deleted),
            )
        if WARM_LABEL in labels_of(job):
            status = replace(status, warm=self.ledger.info(job, status.state))
        kind = job_kind(str(job.get("kind") or ""))
        if kind is None or not kind.replica_ranks:  # ranks map onto replicas only there
            return status
        return complete_exit_codes(status, job_shape(job).procs_per_node)

    def shape(self, name: str) -> JobShape | None:
        route = self.workers.route(name) if self.workers is not None else None
        if route is not None and route.backend is not None:
            return route.backend.statuses.shape(name)  # type: ignore[no-any-return]
        try:
            job = watch(self.cluster, name).job
        except JobNotFound as exc:
            return self.history.gone(name, exc).shape
        return job_shape(job) if job is not None else None
