"""The job service's verbs on existing jobs, each written once: list, status, logs, attach,
cancel, warm, delete, compare, stacks, profile (running one is :mod:`.run`).

Each takes typed options (a :class:`Target` or a :class:`Backend`, a job's name, the verb's
own values) and returns a typed result; a front end (the magic and the console script
through :mod:`jupyter_ktrain.frontends.commands`, the side panel's server) parses its input,
calls one verb and renders what it returns. Bad input and a job that is not there are one
:class:`~jupyter_ktrain.errors.KtrainError`, raised here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..backends.base import Backend, Job
from ..backends.capabilities import HangsWatched, job_shape, warm_capable
from ..backends.registry import default_backend_name, get_backend, listed_backends
from ..config import Config, load_config
from ..errors import JobNotFound, KtrainError, SpecError
from ..jobs import CANCELLED, FAILED, JobShape, JobStatus
from ..monitor.text import failure_summary
from ..monitor.torchrun import job_logs
from ..rank_stacks import show_stacks
from ..spec.values import parse_duration
from ..store.profiles import read_profile, trace_file, trace_name
from ..store.records import job_dir, read_hang
from ..tracking.side_by_side import Comparison, entry
from ..words import ended_by_user
from . import track
from .compare import comparison
from .profile import show_profile

__all__ = [
    "PROFILE_STEPS",
    "Backend",
    "Cancelled",
    "Deleted",
    "Job",
    "JobList",
    "Target",
    "WarmSet",
    "attach",
    "cancel",
    "compare",
    "delete",
    "failure",
    "kept_hang",
    "kept_profile",
    "list_jobs",
    "logs",
    "open_backend",
    "profile",
    "shape",
    "stacks",
    "status",
    "trace",
    "trace_name",
    "warm",
]

PROFILE_STEPS = 3  # what `%ktrain profile NAME` profiles without --steps


@dataclass(frozen=True)
class Target:
    """Which backend a job verb works on: ``backend`` (default: the configured one) and
    ``namespace`` (the Kubernetes backend in that namespace, whatever the config names)."""

    backend: str | None = None
    namespace: str | None = None

    def open(self) -> Backend:
        if self.namespace is None:
            return open_backend(self.backend)
        if (self.backend or default_backend_name()) != "kubernetes":
            raise SpecError(
                "--namespace is for the kubernetes backend: add --backend kubernetes, or set "
                "`%ktrain config backend=kubernetes`."
            )
        config = dataclasses.replace(load_config(), namespace=self.namespace)
        return open_backend("kubernetes", config)

    def listed(self) -> list[str]:
        """The backends a list covers: the one named; else local always and the configured
        one; with a namespace, the cluster's there only."""
        if self.namespace is not None:
            return [self.backend or "kubernetes"]
        return [self.backend] if self.backend else listed_backends()

    def backends(self) -> list[tuple[str, Callable[[], Backend]]]:
        """The listed backends, each with how to open it (:func:`list_jobs`)."""
        return [(name, Target(name, self.namespace).open) for name in self.listed()]


def open_backend(name: str | None, config: Config | None = None) -> Backend:
    """The backend ``name`` (None: the configured one), set up from ``config`` (None: the
    user's); a name that is none: one error listing them."""
    return get_backend(name, config=config)


@dataclass(frozen=True)
class JobList:
    """The jobs of ``backends``, each ``(backend, status)``; ``problems``: each backend that
    could not answer, with why (the list is then incomplete)."""

    backends: tuple[str, ...]
    jobs: tuple[tuple[str, JobStatus], ...]
    problems: tuple[tuple[str, str], ...] = ()


def list_jobs(backends: Iterable[tuple[str, Callable[[], Backend]]]) -> JobList:
    """Jobs of every backend of ``backends`` (name, how to open it: :meth:`Target.backends`),
    in order; a backend that cannot be opened or cannot answer is one of ``problems``, after
    the others' jobs."""
    names: list[str] = []
    jobs: list[tuple[str, JobStatus]] = []
    problems: list[tuple[str, str]] = []
    for name, open_it in backends:
        names.append(name)
        try:
            statuses = open_it().list_jobs()
        except KtrainError as exc:
            problems.append((name, str(exc)))
            continue
        jobs += [(name, s) for s in statuses]
    return JobList(tuple(names), tuple(jobs), tuple(problems))


def status(backend: Backend, name: str) -> JobStatus:
    """The job's status (JobNotFound: no such job)."""
    return backend.status(name)


def attach(backend: Backend, name: str) -> Job:
    """The job's handle, to follow it again (:func:`.follow.follow`)."""
    return backend.attach(name)


def logs(
    backend: Backend,
    name: str,
    rank: int | None = None,
    grep: str | None = None,
    run: int | None = None,
    whole: bool = False,
) -> str:
    """The stored lines (:func:`~jupyter_ktrain.monitor.torchrun.job_logs`), or a line saying
    why there are none; a rank the job does not have: one :class:`SpecError`."""
    job = backend.attach(name)
    text = job_logs(job, rank, grep, run, whole)
    if text:
        return text
    shape = job.shape
    world = shape.nodes * shape.procs_per_node if shape is not None else None
    if rank is not None and world is not None and not 0 <= rank < world:
        raise SpecError(
            f"{job.name!r} has ranks 0-{world - 1}; there is no rank {rank}. "
            f"Pass --rank 0 to {world - 1}, or leave --rank out for every rank."
        )
    who = f"rank {rank}" if rank is not None else job.name
    if grep is not None:
        return f"No line of {who} contains {grep!r} (so far)."
    return f"No output from {who} yet ({job.state})."


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did. ``before``: the job's status when asked (None for a run of a warm
    job); ``after``: its status afterwards, None when the cancel removed it (Kubernetes
    deletes the job); ``done``: False when the job had already ended (nothing was stopped).
    ``run``/``run_state``: the run of a warm job that was stopped, and its state."""

    name: str
    before: JobStatus | None
    after: JobStatus | None
    done: bool = True
    run: int | None = None
    run_state: str | None = None


def cancel(backend: Backend, name: str, run: int | None = None) -> Cancelled:
    """Stop the job, or one run of a warm job (its nodes stay)."""
    if run is not None:
        capable = warm_capable(backend, name)
        capable.cancel_run(name, run)
        state = capable.run_status(name, run).state
        return Cancelled(name, None, None, run=run, run_state=state)
    before = backend.status(name)
    if before.terminal:
        return Cancelled(name, before, before, done=False)
    backend.cancel(name)
    try:
        after: JobStatus | None = backend.status(name)
    except JobNotFound:
        after = None
    return Cancelled(name, before, after)


@dataclass(frozen=True)
class WarmSet:
    """A warm job's new idle limit (``seconds``; 0 or less: it was ended) and its status."""

    name: str
    seconds: float
    status: JobStatus


def warm(backend: Backend, name: str, idle: str) -> WarmSet:
    """Change a warm job's idle limit (``15m``, ``0``: end it now)."""
    seconds = parse_duration(idle)
    return WarmSet(name, seconds, warm_capable(backend, name).set_idle_limit(name, seconds))


@dataclass(frozen=True)
class Deleted:
    """What a delete removed. ``namespace``: the cluster's, None for a job of the local
    backend; ``already``: its objects were gone before (only its history was there);
    ``history``: where its history is kept (None: removed too); ``forgot``: what removing
    its record said ("" when it had none)."""

    name: str
    backend: str
    namespace: str | None
    already: bool
    history: Path | None
    forgot: str = ""


def delete(backend: Backend, name: str, history: bool = False) -> Deleted:
    """Cancel the job and remove what it left. A cluster job's objects are deleted and its
    history kept (``history``: removed too); a local job's folder is its history, so all of
    it goes."""
    found = backend.status(name)  # JobNotFound: neither objects nor history
    namespace = getattr(backend, "namespace", None) if backend.name == "kubernetes" else None
    if not found.from_history:
        backend.delete(name)
    if namespace is None or history:
        forgot = track.forget(backend.name, name)
        return Deleted(name, backend.name, namespace, found.from_history, None, forgot)
    return Deleted(name, backend.name, namespace, found.from_history, job_dir(backend.name, name))


def compare(backend: Backend, names: Sequence[str], metric: str | None = None) -> Comparison:
    """``names`` (jobs, or runs of warm jobs: ``NAME:N``) side by side on ``metric``; a column
    that is not there: one error naming it, before anything is read."""
    for column in map(entry, names):
        if column.run is None:
            backend.status(column.job)
        else:
            warm_capable(backend, column.job).run_status(column.job, column.run)
    return comparison(backend, list(names), metric)


def stacks(backend: Backend, name: str, rank: int | None = None) -> str:
    """Where each running rank (or ``rank``) of the job is now: its Python stack."""
    return show_stacks(backend, name, rank)


def profile(backend: Backend, name: str, steps: int | None = None, rank: int | None = None) -> str:
    """``torch.profiler`` on every running rank (or ``rank``) for its next ``steps`` steps."""
    return show_profile(backend, name, PROFILE_STEPS if steps is None else steps, rank)


def shape(backend: Backend, name: str) -> JobShape | None:
    """The job's shape (kind, nodes, processes per node), when its backend keeps it."""
    return job_shape(backend, name)


def failure(backend: Backend, status: JobStatus) -> str | None:
    """Why the job failed, as the cell says it (first failing rank, kind, last lines); None
    for a job that did not fail, or that its user ended."""
    if status.state not in (FAILED, CANCELLED) or ended_by_user(status):
        return None
    return failure_summary(Job(status.name, backend), status).strip() or None


def kept_hang(backend: Backend, name: str, status: JobStatus) -> dict[str, Any] | None:
    """What was said of the job's hang now, with the stacks taken, while it runs: the job
    store's (said by the cell that follows it, or a local job's own watch), else what the
    backend says from where the job's state is kept (a cluster job no kernel here follows);
    None: no hang, or one said of an earlier job of this name."""
    if status.terminal:
        return None
    hang = read_hang(backend.name, name)
    if hang is not None and _same_start(hang.get("started"), status.started):
        return hang
    return backend.hang(name, status) if isinstance(backend, HangsWatched) else None


def _same_start(kept: object, started: float | None) -> bool:
    """Whether a hang kept for a job of this name was said of this one (not an earlier job)."""
    if kept is None or started is None:
        return kept is None and started is None
    return isinstance(kept, (int, float)) and abs(float(kept) - started) < 1.0


def kept_profile(backend: str, name: str) -> dict[str, Any] | None:
    """The job's last profile as :func:`profile` kept it (the job store's), or None."""
    return read_profile(backend, name)


def trace(backend: str, name: str, rank: int) -> Path:
    """Rank ``rank``'s Chrome trace of the job's last profile; JobNotFound when it has none."""
    path = trace_file(backend, name, rank)
    if path is None:
        raise JobNotFound(
            f"{name!r} has no kept trace of rank {rank}: `%ktrain profile {name} --steps 3` "
            "takes one."
        )
    return path
