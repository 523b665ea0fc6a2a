"""The one Backend interface and the job handle (the states and statuses they speak are in
:mod:`jupyter_ktrain.jobs`, below every layer).

Public methods live here and call a few hooks each backend implements (torchx's shape):
``submit`` is ``schedule(dryrun(...))``, and the dry run is the exact request a backend would
make: a :class:`LaunchPlan` over the backend's own request dataclass (the local backend's
:class:`~.local.request.LocalRequest`: argv and environment per node; the Kubernetes backend's
:class:`~.kubernetes.plan.KubernetesRequest`: the objects to create). A plan is never changed
after it is made: what is known only later (the code image's digest, after the push) goes into
a new plan (``dataclasses.replace``).

To add a backend: a frozen request dataclass (what ``schedule`` needs, and nothing else), a
``Backend`` subclass whose ``dryrun`` returns ``LaunchPlan[YourRequest]`` and whose ``schedule``
starts with ``plan.made_by(YourRequest)``, the capabilities it has (:mod:`.capabilities`: warm
jobs, stored shapes) in its class line, and a name in :func:`~.registry.get_backend`.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

from ..errors import BackendError, JobNotFound
from ..jobs import CANCELLED, CANCELLED_REASON, JobShape, JobStatus
from ..pod.protocol import parse_line
from ..words import describe
from .capabilities import WarmCapable, job_shape, warm_capable
from .logsource import LogSource
from .results import progress_from_logs, results_from_lines
from .warm_shape import check_warm

if TYPE_CHECKING:
    from ..capture import CapturedProgram
    from ..pod.progress import Progress
    from ..spec.job import JobSpec

__all__ = [
    "Backend",
    "Job",
    "LaunchPlan",
    "Request",
]


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


class Backend(ABC):
    """Runs jobs somewhere: the core verbs every backend has. Implementations provide the
    abstract hooks; what only some backends do (warm jobs, stored shapes) is a capability they
    inherit from :mod:`.capabilities`, which callers check by type."""

    name: str = "?"
    #: whether ``--rdma`` takes effect here (the monitor then checks NCCL's transport)
    rdma_capable: bool = True
    # a job's hangs are watched where its state is kept, followed or not (the local
    # supervisor): a follower names them in its cell but leaves the kept hang to that watch
    hangs_watched: bool = False
    #: whether the job's ranks run on this machine's CPUs (its tracking then waits for spare
    #: CPU while the job runs, :mod:`jupyter_ktrain.tracking.cpu`)
    ranks_here: bool = False

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

    def submit(self, spec: JobSpec, program: CapturedProgram) -> Job:
        check_warm(spec)
        return self.schedule(self.dryrun(spec, program))

    def attach(self, name: str) -> Job:
        """A handle on ``name``; on a warm job, on its last run."""
        self.status(name)  # raises JobNotFound
        run = self.latest_run(name) if isinstance(self, WarmCapable) else None
        return Job(name, self, shape=job_shape(self, name), run=run)


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
        return f"<ktrain Job {self.name!r} on {self.backend.name}: {describe(status)}{extra}>"

    def status(self) -> JobStatus:
        if self.dry_run:
            raise BackendError(
                f"{self.name!r} was a dry run: nothing was started. Run the cell without "
                f"--dry-run to start it; `.plan` holds what would be created."
            )
        try:
            if self.run is not None:
                return warm_capable(self.backend, self.name).run_status(self.name, self.run)
            return self.backend.status(self.name)
        except JobNotFound:
            if not self.cancelled:
                raise
            # a backend whose cancel removes the job (Kubernetes deletes it): still Cancelled
            return JobStatus(self.name, CANCELLED, CANCELLED_REASON, finished=time.time())

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
            warm_capable(self.backend, self.name).cancel_run(self.name, self.run)
        else:
            self.backend.cancel(self.name)

    def log_sources(self) -> list[LogSource]:
        """Each replica's stream: of this handle's run, on a warm job."""
        if self.run is not None:
            return warm_capable(self.backend, self.name).run_log_sources(self.name, self.run)
        return self.backend.log_sources(self.name)

    def read_logs(self, run: int | None = None) -> Iterator[tuple[str, str]]:
        """Every stored line as (replica, line): of run ``run`` (default this handle's)."""
        run = self.run if run is None else run
        if run is not None:
            return warm_capable(self.backend, self.name).read_run_logs(self.name, run)
        return self.backend.read_logs(self.name)

    def logs(self, rank: int | None = None, grep: str | None = None, run: int | None = None) -> str:
        """Stored output so far; ``rank`` keeps one rank's lines (without prefix); ``run``
        picks a run of a warm job (default: this handle's run)."""
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
        return progress_from_logs(self.read_logs())

    @property
    def outputs(self) -> dict[str, Any]:
        """Names the cell bound on rank 0 (and ``_`` for a trailing expression)."""
        if self._outputs is None:
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
