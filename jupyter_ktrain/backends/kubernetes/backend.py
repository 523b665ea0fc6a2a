"""The Kubernetes backend: preflight, package, create all-or-nothing, watch, stream, explain.

A thin facade over its parts, each handed the cluster context (:class:`~.cluster.Cluster`:
the API client, the namespace, the jobs' watches and what their logs told) and the other
parts it needs, never the backend:

- :class:`~.dry_run.Planner` (``dryrun``): renders and validates every object once
  (:mod:`.plan`: a :class:`~.plan.KubernetesRequest`; the text is their YAML);
- :class:`~.submit.Submitter` (``schedule``): the preflight, the code packaged (a code image
  pushed to the configured registry and pinned by digest into a new plan, else a ConfigMap),
  the planned objects created, the job last, and made their owner; if creating the job fails,
  what was made is deleted;
- :class:`~.job_status.JobStatuses` and :class:`~.listing.JobListing`: status from a watch
  cache (:mod:`.watch`); :class:`~.job_logs.JobLogs`: logs from per-pod streams (:mod:`.logs`);
- :class:`~.warm_backend.WarmJobs`: the runs of ``--warm`` jobs;
- :class:`~.cluster_history.ClusterHistory`: ended jobs, kept past their objects;
- :class:`~.removal.Removal`: cancel and delete;
- :class:`~.pod_stacks.JobStacks`: every running rank's stack, asked in its pod (``pods/exec``);
- :class:`~.logs.stored_hangs.StoredHangs`: a running job's hang, from its pods' stored lines.

Jobs are found by label (:mod:`.lookup`), so a fresh kernel can list and re-attach.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any

from ...config import Config, load_config
from ...jobs import JobShape, JobStatus
from ...pod.protocol import Profile, Stack
from ..base import Backend, Job, LaunchPlan, Request
from ..capabilities import HangsWatched, ShapeKnown, StacksShown, WarmCapable
from ..logsource import LogSource
from .client.kube_api import Api
from .cluster import BACKEND_NAME, Cluster, Connection
from .logs.stored_hangs import StoredHangs
from .logs.streams import JobLogs
from .lookup import close as close_cluster
from .multikueue import Workers
from .plans.dry_run import Planner
from .plans.plan import KubernetesRequest
from .pod_stacks import JobStacks
from .removal import Removal
from .status.cluster_history import ClusterHistory
from .status.listing import JobListing
from .status.reader import JobStatuses
from .submit import Submitter
from .warm.ledger import WarmLedger
from .warm.runs import WarmJobs

if TYPE_CHECKING:
    from ...capture import CapturedProgram
    from ...spec.job import JobSpec

__all__ = ["KubernetesBackend"]


class KubernetesBackend(Backend, WarmCapable, ShapeKnown, StacksShown, HangsWatched):
    name = BACKEND_NAME

    def __init__(
        self,
        config: Config | None = None,
        api: Api | None = None,
        say: Callable[[str], None] | None = None,
    ):
        self.config = config if config is not None else load_config()
        self.say = say or (lambda text: print(text, file=sys.stdout, flush=True))
        self.cluster = Cluster(self.config, Connection(self.config, api), self.say)
        # MultiKueue: the worker clusters a job may run on, each a backend of its own (made
        # without a reference to this one: a dropped backend is freed at once)
        say = self.say
        self.workers = Workers(self.cluster, lambda cfg, api: KubernetesBackend(cfg, api, say))
        self.history = ClusterHistory(self.cluster)  # ended jobs, kept past their objects
        self.logs = JobLogs(self.cluster, self.history)
        ledger = WarmLedger(self.cluster, self.logs)
        self.statuses = JobStatuses(self.cluster, self.history, ledger, self.workers)
        self.listing = JobListing(self.cluster, self.statuses, self.history, ledger)
        self.warm: WarmJobs = WarmJobs(self.cluster, self.statuses, self.logs, ledger)
        self.planner = Planner(self.cluster, self.warm)
        self.submitter = Submitter(self.cluster, self.history, self.workers)
        self.removal = Removal(self.cluster, self.statuses, self.history, self.workers)
        self.job_stacks = JobStacks(self.cluster)
        self.hangs = StoredHangs(self.cluster, self.job_stacks.stacks)
        # each command makes a backend: the watches it opened and the connection it made end
        # with it (nothing it holds points back at it); a watch ends sooner when idle
        self._closer = weakref.finalize(self, close_cluster, self.cluster)

    def close(self) -> None:
        """End this backend's watches and close its connections now (a later read of a job
        watches it anew)."""
        self.workers.close()
        close_cluster(self.cluster)

    def _on(self, name: str) -> KubernetesBackend:
        """The backend whose cluster runs job ``name``: a MultiKueue worker's, once Kueue
        dispatched the job there and this kubeconfig reaches it; else this one."""
        route = self.workers.route(name)
        return route.backend if route is not None and route.backend is not None else self

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[KubernetesRequest]:
        return self.planner.dryrun(spec, program)

    def schedule(self, plan: LaunchPlan[Request]) -> Job:
        """Start the planned job (a run on a live warm job: order it). The Job holds the plan
        as started (with the image digest)."""
        made = plan.made_by(KubernetesRequest)
        if made.request.reuse:
            return Job(made.spec.name, self, made, run=self.warm.order(made))
        started = self.submitter.start(made)
        return Job(made.spec.name, self, started, run=1 if made.spec.warm else None)

    def status(self, name: str) -> JobStatus:
        return self.statuses.status(name)

    def shape(self, name: str) -> JobShape | None:
        return self.statuses.shape(name)

    def list_jobs(self) -> list[JobStatus]:
        return self.listing.list_jobs()

    def log_sources(self, name: str) -> list[LogSource]:
        return self._sources(name)

    def more_log_sources(self, name: str, known: Collection[str]) -> list[LogSource]:
        return self._sources(name, known)

    def _sources(self, name: str, known: Collection[str] = ()) -> list[LogSource]:
        """The job's log sources on the cluster that runs it; none for a MultiKueue job not
        on a worker yet, or on one this kubeconfig does not reach (its pods are not here)."""
        route = self.workers.route(name)
        if route is None and not self.workers.multikueue(name):
            return self.logs.sources(name, known)
        if route is None or route.backend is None:
            return []
        return route.backend.logs.sources(name, known)  # type: ignore[no-any-return]

    def read_logs(self, name: str) -> Iterator[tuple[str, str]]:
        yield from self._on(name).logs.read(name)

    def read_logs_timed(self, name: str) -> Iterator[tuple[float | None, str, str]]:
        return self._on(name).logs.read_timed(name)

    def stacks(self, name: str, rank: int | None = None) -> list[tuple[str, Stack]]:
        return self._on(name).job_stacks.stacks(name, rank)

    def profile(self, name: str, steps: int, rank: int | None = None) -> list[tuple[str, Profile]]:
        return self._on(name).job_stacks.profile(name, steps, rank)

    def hang(self, name: str, status: JobStatus) -> dict[str, Any] | None:
        return self._on(name).hangs.hang(name, status)

    def cancel(self, name: str) -> None:
        self.removal.cancel(name)

    def delete(self, name: str) -> None:
        self.removal.delete(name)
