"""What a backend may do besides the core verbs of :class:`~.base.Backend` (plan, start, status,
logs, cancel, list, delete): each capability is a mixin a backend class inherits, and callers
check it by type, as torchx does with its scheduler mixins.

- :class:`WarmCapable`: keeps warm jobs (``--warm``) and their runs; the backend sets ``warm``
  to what keeps them (a :class:`WarmRuns`), and the mixin hands the calls on;
- :class:`ShapeKnown`: stored the shape a job was started with (what a monitor attached later,
  the side panel and ``compare`` show);
- :class:`StacksShown`: asks a running job's ranks for their Python stacks (``stacks``), and
  for a profile of their next steps (``profile``) the same way;
- :class:`HangsWatched`: says a running job's hang where no kernel follows it (a cluster job:
  from the lines its pods stored; a local job's supervisor keeps its own in the job store).

A caller that needs a capability asks :func:`warm_capable` or :func:`stacks_shown` (the backend
as that capability, or one :class:`~jupyter_ktrain.errors.BackendError` saying it lacks it) or
:func:`job_shape` (None where unknown). To add a capability: a mixin here with its methods and
docstrings, a helper like those for its callers, and the capability in the class line of each
backend that has it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import BackendError

if TYPE_CHECKING:
    from ..jobs import JobShape, JobStatus
    from ..pod.protocol import Profile, Stack
    from .logsource import LogSource

__all__ = [
    "HangsWatched",
    "Named",
    "ShapeKnown",
    "StacksShown",
    "WarmCapable",
    "WarmRuns",
    "job_shape",
    "stacks_shown",
    "warm_capable",
]


class Named(Protocol):
    """What the helpers below need of a backend (any :class:`~.base.Backend`): its name.
    They take a backend by this, not by its class, so this module stays below :mod:`.base`
    (which builds the job handle on these capabilities)."""

    @property
    def name(self) -> str: ...


class WarmRuns(Protocol):
    """The runs of a backend's warm jobs: local ``local.warm_runs.LocalWarm``, Kubernetes
    ``kubernetes.warm_backend.WarmJobs``."""

    def latest_run(self, name: str) -> int | None: ...
    def run_status(self, name: str, run: int) -> JobStatus: ...
    def run_log_sources(self, name: str, run: int) -> list[LogSource]: ...
    def read_run_logs(self, name: str, run: int) -> Iterator[tuple[str, str]]: ...
    def cancel_run(self, name: str, run: int) -> None: ...
    def set_idle_limit(self, name: str, seconds: float) -> JobStatus: ...


class WarmCapable:
    """A backend that keeps warm jobs (``--warm``): nodes that stay up between runs. It sets
    ``warm`` in its ``__init__``; these calls go there."""

    warm: WarmRuns

    def run_status(self, name: str, run: int) -> JobStatus:
        """Run ``run`` of warm job ``name``, as a job's status (its own state, codes, times)."""
        return self.warm.run_status(name, run)

    def run_log_sources(self, name: str, run: int) -> list[LogSource]:
        return self.warm.run_log_sources(name, run)

    def read_run_logs(self, name: str, run: int) -> Iterator[tuple[str, str]]:
        return self.warm.read_run_logs(name, run)

    def cancel_run(self, name: str, run: int) -> None:
        """Stop run ``run``; the warm job's nodes stay, ready for the next."""
        self.warm.cancel_run(name, run)

    def latest_run(self, name: str) -> int | None:
        """The last run of warm job ``name``; None for a job that is not warm."""
        return self.warm.latest_run(name)

    def set_idle_limit(self, name: str, seconds: float) -> JobStatus:
        """``%ktrain warm NAME --idle``: a warm job's idle limit; 0 ends it now."""
        return self.warm.set_idle_limit(name, seconds)


class ShapeKnown(ABC):
    """A backend that stores the shape each job was started with (kind, nodes, processes,
    GPUs)."""

    @abstractmethod
    def shape(self, name: str) -> JobShape | None:
        """The shape job ``name`` was started with; None when it was not stored."""


class StacksShown(ABC):
    """A backend that asks a running job's ranks for their Python stacks, every thread
    (:mod:`jupyter_ktrain.pod.stacks`)."""

    @abstractmethod
    def stacks(self, name: str, rank: int | None = None) -> list[tuple[str, Stack]]:
        """(where, stack) of each rank of job ``name`` that runs now (of ``rank`` only), by
        rank; ``where`` names the rank's pod where there is one (else ""). A rank that could
        not answer is a :class:`~jupyter_ktrain.pod.protocol.Stack` saying why; a job with no
        rank running gives []."""

    @abstractmethod
    def profile(self, name: str, steps: int, rank: int | None = None) -> list[tuple[str, Profile]]:
        """(where, profile) of the next ``steps`` steps of each rank of job ``name`` that runs
        now (of ``rank`` only), asked as :meth:`stacks` asks (:mod:`jupyter_ktrain.pod.
        profiler`); a rank that took none is a :class:`~jupyter_ktrain.pod.protocol.Profile`
        saying why."""


class HangsWatched(ABC):
    """A backend that says a running job's hang from where the job's state is kept, whether a
    kernel follows the job or not (:mod:`jupyter_ktrain.hangs`)."""

    @abstractmethod
    def hang(self, name: str, status: JobStatus) -> dict[str, Any] | None:
        """What is said of job ``name``'s hang now, as a kept hang (``started``: the job's
        start as ``status`` says it, ``t``, ``text``, ``stacks``); None: no hang."""


def stacks_shown(backend: Named, name: str) -> StacksShown:
    """``backend`` as one that shows stacks; :class:`BackendError` when it cannot (a caller
    asked for those of job ``name``)."""
    if not isinstance(backend, StacksShown):
        raise BackendError(f"The {backend.name} backend cannot show the stacks of {name!r}.")
    return backend


def warm_capable(backend: Named, name: str) -> WarmCapable:
    """``backend`` as a keeper of warm jobs; :class:`BackendError` when it keeps none (a
    caller asked for runs of job ``name``)."""
    if not isinstance(backend, WarmCapable):
        raise BackendError(f"The {backend.name} backend has no warm jobs (no runs of {name!r}).")
    return backend


def job_shape(backend: Named, name: str) -> JobShape | None:
    """The shape job ``name`` was started with, where ``backend`` stores shapes; else None."""
    return backend.shape(name) if isinstance(backend, ShapeKnown) else None
