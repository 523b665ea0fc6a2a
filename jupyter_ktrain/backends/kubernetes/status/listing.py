"""``%ktrain list`` of a namespace: every job of this tool (one list per kind), each with its
state (Kueue's, while queued), its progress and, for a warm job, its runs; then the jobs kept in
the history whose objects are gone."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ....errors import ClusterError, KtrainError
from ....jobs import RUNNING, TERMINAL_STATES, JobStatus
from ....kinds import job_kind
from ....pod.progress import Progress
from ..client.resources import POD
from ..client.retries import ApiFailure
from ..cluster import Cluster
from ..labels import MANAGED_BY
from ..logs.stored import log_request
from ..lookup import job_objects
from ..multikueue import dispatched_to
from ..plans.builders import TRAINJOB_TARGET
from ..warm.ledger import WarmLedger
from .cluster_history import ClusterHistory
from .derive import queued_state, replica_pods, trainer_progress
from .job_runtime import JobRuntime
from .reader import JobStatuses, on_cluster
from .watch import owned_workload

__all__ = ["PROGRESS_REFRESH_S", "PROGRESS_TAIL_LINES", "JobListing"]

PROGRESS_TAIL_LINES = 400  # lines of a job's rank-0 pod read for a list's progress
PROGRESS_REFRESH_S = 10.0  # at most this often per running job


class JobListing:
    """The list of the jobs in the ``cluster`` context's namespace."""

    def __init__(
        self,
        cluster: Cluster,
        statuses: JobStatuses,
        history: ClusterHistory,
        ledger: WarmLedger,
    ) -> None:
        self.cluster = cluster
        self.statuses = statuses
        self.history = history
        self.ledger = ledger
        # job -> (uid, when read, progress) of the rank-0 tail read for lists
        self._tail_progress: dict[str, tuple[str, float, Progress | None]] = {}

    def list_jobs(self) -> list[JobStatus]:
        """Every job of this tool in the namespace (one list per kind), each with its progress:
        from this process's follow of the job, else the TrainJob's ``trainerStatus``, else the
        last lines of its rank-0 pod (read at most every PROGRESS_REFRESH_S per running job), so
        the side panel and ``%ktrain list`` show percent and ETA for jobs no kernel follows."""
        out: list[JobStatus] = []
        cluster = self.cluster
        jobs = job_objects(cluster, f"{MANAGED_BY[0]}={MANAGED_BY[1]}")
        workloads = cluster.queue.workloads(cluster.api, cluster.namespace, jobs)
        for job in jobs:
            workload = owned_workload(job, workloads)
            state, reason, message = queued_state(job, workload)
            where = dispatched_to(job, workload)  # MultiKueue: the worker cluster it runs on
            message = on_cluster(where, message) if where else message
            if state in TERMINAL_STATES and not self.history.is_kept(job):
                with contextlib.suppress(KtrainError):  # kept by its status, once
                    self.statuses.status(job["metadata"]["name"])
            progress = self._progress(job, state)
            warm = self.ledger.info(job, state)
            out.append(
                JobStatus(
                    job["metadata"]["name"], state, reason, message, progress=progress, warm=warm
                )
            )
        out += self.history.listed({j["metadata"]["name"] for j in jobs})
        return sorted(out, key=lambda s: s.name)

    def _progress(self, job: dict[str, Any], state: str) -> Progress | None:
        meta = job["metadata"]
        name, uid = meta["name"], meta.get("uid", "")
        rt = self.cluster.runtimes.get(name)
        if rt is not None and rt.progress.progress is not None:
            return rt.progress.progress
        reported = trainer_progress((job.get("status") or {}).get("trainerStatus"))
        if reported is not None:
            return reported
        seen = self._tail_progress.get(name)
        recent = seen is not None and time.monotonic() - seen[1] < PROGRESS_REFRESH_S
        if seen is not None and seen[0] == uid and (state != RUNNING or recent):
            return seen[2]  # kept once the job is over; re-read while it runs
        if state != RUNNING:  # a job never seen running: its logs are not read for a list
            return None
        progress = None
        with contextlib.suppress(ApiFailure, ClusterError):
            progress = self._progress_from_tail(job)
        self._tail_progress[name] = (uid, time.monotonic(), progress)
        return progress

    def _progress_from_tail(self, job: dict[str, Any]) -> Progress | None:
        """Progress from the last PROGRESS_TAIL_LINES lines of the job's first pod (the one
        holding rank 0; an MPIJob's launcher prints every rank)."""
        pods = replica_pods(job)
        kind = job_kind(str(job.get("kind") or ""))
        if not pods and kind is not None and kind.trainer_runtime:
            selector = (
                f"jobset.sigs.k8s.io/jobset-name={job['metadata']['name']},"
                f"jobset.sigs.k8s.io/replicatedjob-name={TRAINJOB_TARGET},"
                "batch.kubernetes.io/job-completion-index=0"
            )
            path = POD.path(self.cluster.namespace)
            found = self.cluster.api.items(path, {"labelSelector": selector})
            pods = [p["metadata"]["name"] for p in found]
        if not pods:
            return None
        path, query = log_request(self.cluster, job, pods[0])
        query["tailLines"] = PROGRESS_TAIL_LINES
        rt = JobRuntime()  # the same reading of records as a followed job's
        # a stalled read ends the tail (what came is used): a list never hangs on one pod
        for raw in self.cluster.api.logs(path, query, read_timeout=10.0, partial=True):
            rt.on_line(pods[0], 0, raw.decode("utf-8", "replace"))
        return rt.progress.progress
