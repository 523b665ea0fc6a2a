"""Follow a job: poll its status, read every replica's new lines, hand them to a sink.

One loop for every backend and every view (text in a terminal or nbclient, the widget in a
notebook). It ends when the job is terminal and every stream has been drained, or when the
caller interrupts it (the job keeps running: following is only watching).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..errors import JobNotFound
from ..jobs import CANCELLED, DELETED_REASON, JobStatus
from ..pod.protocol import LogLine, parse_line

if TYPE_CHECKING:
    from ..backends.base import Job

__all__ = ["Sink", "follow"]


class Sink(Protocol):
    """Receives a job's lines and state changes. A sink may also have ``tick()``: then it is
    called once per poll (after the lines), e.g. to redraw or to notice silence."""

    def lines(self, replica: str, lines: list[LogLine]) -> None: ...
    def status(self, status: JobStatus) -> None: ...


def follow(
    job: Job,
    sink: Sink,
    interval: float = 0.05,
    sleep: Callable[[float], None] = time.sleep,
) -> JobStatus:
    """Stream ``job`` into ``sink`` until it ends; return the final status."""
    sources = job.log_sources()
    tick: Callable[[], None] | None = getattr(sink, "tick", None)
    last_state = None
    try:
        while True:
            status = _status(job)
            # the progress too: the views show the backend's (the panel's) as it moves
            seen = (status.state, status.replicas, status.message, status.evictions,
                    status.dashboard, status.progress, status.reason)  # fmt: skip
            if seen != last_state:
                sink.status(status)
                last_state = seen
            if job.run is None:  # a warm job's run has its nodes from the start
                sources += job.backend.more_log_sources(job.name, {s.replica for s in sources})
            for source in sources:
                raw = source.finish() if status.terminal else source.read()
                if raw:
                    sink.lines(source.replica, [parse_line(line) for line in raw])
            if status.terminal:
                # the streams are drained: ask once more, so the final word includes what the
                # watches learned meanwhile (how a replica's last container ended, a restart)
                final = _status(job)
                if final.terminal and (final.state, final.replicas, final.message) != (
                    status.state,
                    status.replicas,
                    status.message,
                ):
                    sink.status(final)
                    status = final
            if tick is not None:
                tick()
            if status.terminal:
                return status
            sleep(interval)
    finally:
        for source in sources:
            source.close()


def _status(job: Job) -> JobStatus:
    """The job's status; a job deleted while followed (``%ktrain cancel``, the panel's or the
    CLI's cancel, ``kubectl delete``: a cancel deletes a cluster job) ended Cancelled."""

    try:
        return job.status()
    except JobNotFound as exc:
        return JobStatus(
            job.name,
            CANCELLED,
            DELETED_REASON,
            f"{str(exc).rstrip('.')}: it was cancelled (by %ktrain cancel, the side panel or "
            "ktrain cancel) or deleted with kubectl while this cell followed it.",
        )
