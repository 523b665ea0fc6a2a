"""The one Backend interface, the job handle, and the shapes they exchange.

Public methods live here and call a few hooks each backend implements (torchx's shape):
``submit`` is ``schedule(dryrun(...))``, and the dry run is the exact request a backend would
make: a :class:`LaunchPlan` over the backend's own request dataclass (the local backend's
:class:`~.local.LocalRequest`: argv and environment per node; the Kubernetes backend's
:class:`~.kubernetes.plan.KubernetesRequest`: the objects to create). A plan is never changed
after it is made: what is known only later (the code image's digest, after the push) goes into
a new plan (``dataclasses.replace``).

To add a backend: a frozen request dataclass (what ``schedule`` needs, and nothing else), a
``Backend`` subclass whose ``dryrun`` returns ``LaunchPlan[YourRequest]`` and whose ``schedule``
starts with ``plan.made_by(YourRequest)``, and a name in :func:`~.get_backend`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from ..errors import BackendError, JobNotFound

# the job states: one list for backends and views (jupyter_ktrain.jobs)
from ..jobs import BACKEND_ENDS
from ..jobs import CANCELLED as CANCELLED
from ..jobs import FAILED as FAILED
from ..jobs import PENDING as PENDING
from ..jobs import QUEUED as QUEUED
from ..jobs import RUNNING as RUNNING
from ..jobs import SUCCEEDED as SUCCEEDED
from ..kinds import DEFAULT_KIND

if TYPE_CHECKING:
    from ..capture import CapturedProgram
    from ..pod.progress import Progress
    from ..spec import JobSpec

__all__ = [
    "CANCELLED",
    "QUEUED",
    "TERMINAL",
    "Backend",
    "Eviction",
    "Job",
    "JobShape",
    "JobStatus",
    "LaunchPlan",
    "LogSource",
    "ReplicaStatus",
    "Request",
    "WarmInfo",
    "complete_exit_codes",
]

TERMINAL = BACKEND_ENDS  # a backend's ends (a model adds Deleted)


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica: a pod, or one local node (a torchrun agent)."""

    name: str
    phase: str
    restarts: int = 0
    node: str = ""
    exit_code: int | None = None
    last_event: str = ""
    # why it last restarted ("restarted after exit 137, ..."), kept apart from ``last_event``,
    # which a newer state (e.g. PodInitializing) may take over
    restart_cause: str = ""


@dataclass(frozen=True)
class Eviction:
    """How often a queue (Kueue) took the job's pods back for one reason: preempted by a
    higher-priority job, pods not ready in time, ... The job was requeued, not failed."""

    reason: str
    text: str  # the reason as a user reads it ("" when the queue gave none we know)
    count: int


@dataclass(frozen=True)
class JobStatus:
    """What a user checks: state (Pending/Running/Succeeded/Failed), why, and per-rank codes.

    ``failed_rank`` is the first rank that failed (by time), when known, so its last lines can
    be shown first. ``max_restarts`` is the job's limit of fault restarts (Kubernetes:
    ``backoffLimit``). ``progress`` is percent done and time left, once the job reports a total
    (``ktrain.report(step=..., total=...)`` or the Transformers Trainer); None before.
    """

    name: str
    state: str
    reason: str = ""
    message: str = ""
    exit_codes: Mapping[int, int] = field(default_factory=dict)
    replicas: tuple[ReplicaStatus, ...] = ()
    started: float | None = None
    finished: float | None = None
    failed_rank: int | None = None
    progress: Progress | None = None
    max_restarts: int | None = None  # how many fault restarts the job allows, when known
    # a warm job (``--warm``): its runs so far, the run in progress, since when it is idle, its
    # idle limit in seconds and its GPUs; None for any other job
    warm: WarmInfo | None = None
    # a queued job (Kueue): each reason it was evicted and requeued for, with its count, and
    # the queue that admitted it ("ClusterQueue 'x'"; "" while it waits or went through none)
    evictions: tuple[Eviction, ...] = ()
    admitted_by: str = ""
    # where to watch the job in its framework's own UI ("Ray dashboard: http://..."), once known
    dashboard: str = ""
    # read from the job store (:mod:`.history`): the job's objects are gone (deleted)
    from_history: bool = False

    @property
    def restarts(self) -> int:
        """Restarts of every replica so far (a fault restarted: killed, deleted, preempted)."""
        return sum(r.restarts for r in self.replicas)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def describe(self, now: float | None = None) -> str:
        """``Running · 42% (420/1000) · 1m 30s left · reason`` (one line, for lists)."""
        parts = [self.state]
        if self.progress is not None:
            from ..pod.progress import progress_text

            parts.append(progress_text(self.progress, now or time.time(), self.terminal))
        if self.warm is not None:
            parts.append(self.warm.describe(now or time.time(), self.terminal))
        if self.reason:
            parts.append(self.reason)
        return " · ".join(parts)


@dataclass(frozen=True)
class WarmInfo:
    """A warm job between and during runs (what ``%ktrain list`` and the side panel show)."""

    runs: int = 0
    active: int | None = None
    idle_since: float | None = None
    idle_limit_s: float = 900.0
    gpus: int = 0

    def idle_s(self, now: float) -> float:
        return 0.0 if self.idle_since is None else max(0.0, now - self.idle_since)

    def idle_gpu_hours(self, now: float) -> float:
        """GPU-hours held idle since the last run ended (the current idle stretch)."""
        return self.gpus * self.idle_s(now) / 3600.0

    def describe(self, now: float, ended: bool = False) -> str:
        runs = f"warm, {self.runs} run(s)"
        if ended:
            return runs
        if self.active is not None:
            return f"{runs}, run {self.active} running"
        idle = f"{runs}, idle {_short(self.idle_s(now))} of {_short(self.idle_limit_s)}"
        if self.gpus:
            idle += f", {self.gpus} GPU(s), {self.idle_gpu_hours(now):.2f} idle GPU-h"
        return idle


def _short(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def complete_exit_codes(status: JobStatus, procs_per_node: int) -> JobStatus:
    """``status`` with one exit code per rank once it ended: a rank that never reported its
    own (stopped with its replica, or never started) gets its replica's code (1 if unknown).
    Replicas are in node-rank order; rank r runs on replica r // procs_per_node."""
    if not status.terminal or not status.replicas or procs_per_node < 1:
        return status
    codes = dict(status.exit_codes)
    for node, replica in enumerate(status.replicas):
        for rank in range(node * procs_per_node, (node + 1) * procs_per_node):
            code = replica.exit_code
            codes.setdefault(rank, code if code is not None else 1)
    return replace(status, exit_codes=codes)


class Request(Protocol):
    """What any backend's request tells a reader that does not know the backend (the
    monitor's header). Each backend's request is a frozen dataclass of its own."""

    @property
    def image_digest(self) -> str | None:
        """The digest of the code image the job runs, once pushed; None without one."""
        ...


R = TypeVar("R", bound=Request)
R_co = TypeVar("R_co", bound=Request, covariant=True)


@dataclass(frozen=True)
class LaunchPlan(Generic[R_co]):
    """The exact request a backend would make. ``describe()`` is what ``--dry-run`` prints.

    ``request`` is the backend's own part (what its ``schedule`` needs); the rest is the same
    for every backend. Frozen and never changed: a step that learns more returns a new plan.
    """

    spec: JobSpec
    program: CapturedProgram
    backend: str
    request: R_co
    text: str
    files: Mapping[str, bytes] = field(default_factory=dict)  # everything shipped with the code
    notes: tuple[str, ...] = ()  # what the user should know before it starts
    # values of ``--env NAME`` (no value) for the launching process's environment only:
    # never written to a file, never shown
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    def describe(self) -> str:
        return self.text

    def made_by(self, request_type: type[R]) -> LaunchPlan[R]:
        """This plan typed by its request: the first line of a backend's ``schedule``. A plan
        another backend made raises :class:`BackendError`."""
        if not isinstance(self.request, request_type):
            raise BackendError(
                f"This plan was made by the {self.backend} backend: start it with that backend "
                f"(`%%ktrain --backend {self.backend}`)."
            )
        return cast("LaunchPlan[R]", self)


class LogSource(ABC):
    """One replica's log stream, read incrementally: ``read()`` returns the complete lines
    that arrived since the last call (never blocks for long); ``done`` once the stream ended."""

    replica: str

    @abstractmethod
    def read(self) -> list[str]: ...

    @property
    @abstractmethod
    def done(self) -> bool: ...

    def finish(self) -> list[str]:
        """Called once the job ended: whatever is left, including a last partial line."""
        return self.read()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the source holds (threads, connections)."""


class WarmRuns(Protocol):
    """The runs of a backend's warm jobs (``--warm``): local ``local_warm.LocalWarm``,
    Kubernetes ``kubernetes.warm_backend.WarmJobs``; :class:`Backend` hands these calls on."""

    def latest_run(self, name: str) -> int | None: ...
    def run_status(self, name: str, run: int) -> JobStatus: ...
    def run_log_sources(self, name: str, run: int) -> list[LogSource]: ...
    def read_run_logs(self, name: str, run: int) -> Iterator[tuple[str, str]]: ...
    def cancel_run(self, name: str, run: int) -> None: ...
    def set_idle_limit(self, name: str, seconds: float) -> JobStatus: ...


class Backend(ABC):
    """Runs jobs somewhere. Implementations provide the abstract hooks."""

    name: str = "?"
    #: whether ``--rdma`` takes effect here (the monitor then checks NCCL's transport)
    rdma_capable: bool = True

    @abstractmethod
    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[Request]:
        """Everything ``schedule`` would do, computed but not done (a subclass returns its own
        request type: ``LaunchPlan[LocalRequest]``)."""

    @abstractmethod
    def schedule(self, plan: LaunchPlan[Request]) -> Job:
        """Start the planned job, all-or-nothing: a plan this backend's ``dryrun`` made."""

    @abstractmethod
    def status(self, name: str) -> JobStatus: ...

    @abstractmethod
    def log_sources(self, name: str) -> list[LogSource]: ...

    def more_log_sources(self, name: str, known: Collection[str]) -> list[LogSource]:
        """Sources for replicas that appeared since ``known`` were handed out (pods created
        late or made anew under a new name); none where the replicas are fixed up front."""
        return []

    @abstractmethod
    def cancel(self, name: str) -> None: ...

    @abstractmethod
    def list_jobs(self) -> list[JobStatus]: ...

    @abstractmethod
    def delete(self, name: str) -> None:
        """Stop the job if it runs, then remove it and everything made for it."""

    @abstractmethod
    def read_logs(self, name: str) -> Iterator[tuple[str, str]]:
        """Every stored line so far as (replica, line), per replica in order."""

    def read_logs_timed(self, name: str) -> Iterator[tuple[float | None, str, str]]:
        """Every stored line so far as (time it was written or None, replica, line), per
        replica in order; backends that keep times override this (merging replicas by time
        needs it)."""
        for replica, line in self.read_logs(name):
            yield None, replica, line

    def read_logs_from(
        self, name: str, start: Mapping[str, int], limit: int | None = None
    ) -> Iterator[tuple[float | None, str, int, str]]:
        """Stored lines after the first ``start[replica]`` of each replica (at most ``limit``
        per replica), as (time or None, replica, index of the line in its replica, line). A
        reader that polls passes back how far it got. This default reads everything and
        skips; a backend that can seek (the local one: byte offsets in its log files) reads
        only the new part."""
        counts: dict[str, int] = {}
        for t, replica, line in self.read_logs_timed(name):
            index = counts.get(replica, 0)
            counts[replica] = index + 1
            first = start.get(replica, 0)
            if index >= first and (limit is None or index < first + limit):
                yield t, replica, index, line

    # -- the runs of a warm job (``--warm``): a backend that keeps warm jobs sets ``warm`` --
    #: what keeps this backend's warm jobs (see :class:`WarmRuns`); None: it has none
    warm: WarmRuns | None = None

    def _warm_runs(self, name: str) -> WarmRuns:
        if self.warm is None:
            raise BackendError(f"The {self.name} backend has no warm jobs (no runs of {name!r}).")
        return self.warm

    def run_status(self, name: str, run: int) -> JobStatus:
        """Run ``run`` of warm job ``name``, as a job's status (its own state, codes, times)."""
        return self._warm_runs(name).run_status(name, run)

    def run_log_sources(self, name: str, run: int) -> list[LogSource]:
        return self._warm_runs(name).run_log_sources(name, run)

    def read_run_logs(self, name: str, run: int) -> Iterator[tuple[str, str]]:
        return self._warm_runs(name).read_run_logs(name, run)

    def cancel_run(self, name: str, run: int) -> None:
        """Stop run ``run``; the warm job's nodes stay, ready for the next."""
        self._warm_runs(name).cancel_run(name, run)

    def latest_run(self, name: str) -> int | None:
        """The last run of warm job ``name``; None for a job that is not warm."""
        return None if self.warm is None else self.warm.latest_run(name)

    def set_idle_limit(self, name: str, seconds: float) -> JobStatus:
        """``%ktrain warm NAME --idle``: a warm job's idle limit; 0 ends it now."""
        return self._warm_runs(name).set_idle_limit(name, seconds)

    def submit(self, spec: JobSpec, program: CapturedProgram) -> Job:
        from .warm import check_warm

        check_warm(spec)
        return self.schedule(self.dryrun(spec, program))

    def attach(self, name: str) -> Job:
        """A handle on ``name``; on a warm job, on its last run."""
        self.status(name)  # raises JobNotFound
        return Job(name, self, shape=self.shape(name), run=self.latest_run(name))

    def shape(self, name: str) -> JobShape | None:
        """The shape the job was started with (kind, nodes, processes, GPUs), when the backend
        stored it: what a monitor attached later shows. None when unknown."""
        return None


@dataclass(frozen=True)
class JobShape:
    """How a job was started: what its monitor's header shows, also after ``attach``."""

    kind: str = DEFAULT_KIND
    nodes: int = 1
    procs_per_node: int = 1
    gpus_per_node: int = 0


class Job:
    """Handle on a submitted job: ``state``, ``status()`` (with ``progress``), ``logs()``,
    ``exit_codes``, ``result``, ``progress_history()``, ``wait()``, ``cancel()``. Cheap to
    create; every property asks the backend."""

    def __init__(
        self,
        name: str,
        backend: Backend,
        plan: LaunchPlan[Request] | None = None,
        dry_run: bool = False,
        shape: JobShape | None = None,
        run: int | None = None,
    ):
        self.name = name
        self.backend = backend
        self.plan = plan
        self.dry_run = dry_run
        self.shape = shape
        self.run = run  # on a warm job: the run this handle follows
        self.cancelled = False  # this handle cancelled it (a deleted job then reads Cancelled)
        self._outputs: dict[str, Any] | None = None

    def __repr__(self) -> str:
        if self.dry_run:
            return f"<ktrain dry run {self.name!r} on {self.backend.name}: nothing started>"
        status = self.status()
        extra = f", failed rank {status.failed_rank}" if status.failed_rank is not None else ""
        return f"<ktrain Job {self.name!r} on {self.backend.name}: {status.describe()}{extra}>"

    def status(self) -> JobStatus:
        if self.dry_run:
            raise BackendError(
                f"{self.name!r} was a dry run: nothing was started. Run the cell without "
                f"--dry-run to start it; `.plan` holds what would be created."
            )
        try:
            if self.run is not None:
                return self.backend.run_status(self.name, self.run)
            return self.backend.status(self.name)
        except JobNotFound:
            if not self.cancelled:
                raise
            # a backend whose cancel removes the job (Kubernetes deletes it): still Cancelled
            return JobStatus(self.name, CANCELLED, "CancelledByUser", finished=time.time())

    @property
    def state(self) -> str:
        return self.status().state

    @property
    def exit_codes(self) -> dict[int, int]:
        return dict(self.status().exit_codes)

    def wait(self, timeout: float | None = None, poll: float = 0.2) -> str:
        """Block until the job ends (or ``timeout`` seconds pass); return its state."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.terminal:
                return status.state
            if deadline is not None and time.monotonic() > deadline:
                raise BackendError(
                    f"Job {self.name!r} is still {status.state} after {timeout} s. "
                    f"Call wait() again, or cancel() it."
                )
            time.sleep(poll)

    def cancel(self) -> None:
        """Stop the job; on a warm job, stop this handle's run (the nodes stay warm)."""
        self.cancelled = True
        if self.run is not None:
            self.backend.cancel_run(self.name, self.run)
        else:
            self.backend.cancel(self.name)

    def log_sources(self) -> list[LogSource]:
        """Each replica's stream: of this handle's run, on a warm job."""
        if self.run is not None:
            return self.backend.run_log_sources(self.name, self.run)
        return self.backend.log_sources(self.name)

    def read_logs(self, run: int | None = None) -> Iterator[tuple[str, str]]:
        """Every stored line as (replica, line): of run ``run`` (default this handle's)."""
        run = self.run if run is None else run
        if run is not None:
            return self.backend.read_run_logs(self.name, run)
        return self.backend.read_logs(self.name)

    def logs(self, rank: int | None = None, grep: str | None = None, run: int | None = None) -> str:
        """Stored output so far; ``rank`` keeps one rank's lines (without prefix); ``run``
        picks a run of a warm job (default: this handle's run)."""
        from ..pod.protocol import parse_line

        out = []
        for _replica, raw in self.read_logs(run):
            line = parse_line(raw)
            if line.record is not None:
                continue
            if rank is not None and line.rank != rank:
                continue
            text = line.text if rank is not None else raw
            if grep is None or grep in text:
                out.append(text)
        return "\n".join(out) + ("\n" if out else "")

    def progress_history(self) -> list[Progress]:
        """Every progress update so far (percent done, ETA as it was then), from the logs."""
        from ..monitor.results import progress_from_logs

        return progress_from_logs(self.read_logs())

    @property
    def outputs(self) -> dict[str, Any]:
        """Names the cell bound on rank 0 (and ``_`` for a trailing expression)."""
        if self._outputs is None:
            from ..monitor.results import results_from_lines

            lines = (raw for _replica, raw in self.read_logs())
            found = results_from_lines(lines)
            if found is None:
                return {}
            self._outputs = found
        return dict(self._outputs)

    @property
    def result(self) -> Any:
        """The cell's value on rank 0: its trailing expression, else its last assignment."""
        outputs = self.outputs
        if "_" in outputs:
            return outputs["_"]
        program = self.plan.program if self.plan else None
        names = list(program.result_names) if program else list(outputs)
        for name in reversed(names):
            if name in outputs:
                return outputs[name]
        return None
