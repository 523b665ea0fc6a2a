"""What a job's monitor says besides its lines and series: the header (the job, its shape, its
state and times), the alerts above the logs, and the restart markers in the plots."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...jobs import PENDING, JobShape, JobState, is_terminal

__all__ = ["Alert", "JobHeader", "Marker"]


@dataclass
class JobHeader:
    """The header line of the monitor: the job, its ``shape`` (how it was started), and the
    state the monitor last saw. ``start_time``/``end_time`` are epoch seconds."""

    name: str
    shape: JobShape = field(default_factory=JobShape)
    backend: str = "local"
    state: JobState = PENDING
    message: str = ""
    image_digest: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    run: int | None = None  # a warm job's run this monitor follows (None: any other job)
    waiting_since: float | None = None  # when the monitor saw it wait (Pending, Queued)

    def elapsed(self, now: float) -> float:
        """Seconds it has run; before it started, seconds it has waited (the header's clock
        counts while it is Pending); 0 for one that ended without starting."""
        if self.start_time is None:
            if self.waiting_since is None or self.finished:
                return 0.0
            return max(0.0, now - self.waiting_since)
        return max(0.0, (self.end_time if self.end_time is not None else now) - self.start_time)

    @property
    def finished(self) -> bool:
        return is_terminal(self.state)


@dataclass(frozen=True)
class Alert:
    """A warning shown above the logs. ``code``: ``rdma-fallback``, ``gpu-low-util``,
    ``rank-hung`` (:mod:`.hangs`), ``straggler`` (:mod:`.stragglers`), ``restart``,
    ``resume``, ``admitted``, ``evicted``, ``link``; ``key`` tells instances apart (a rank, a
    GPU, a replica's n-th restart)."""

    code: str
    key: str
    message: str
    since: float


@dataclass(frozen=True)
class Marker:
    """A restart in the metric plots: at step ``x``, ``text`` says what happened there."""

    x: float
    text: str
