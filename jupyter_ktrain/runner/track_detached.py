"""A job logged to MLflow by the Jupyter server while the side panel follows it.

A job started with tracking is logged by the kernel that follows it
(:func:`~..runner.track.sink_for`). A ``--detach``ed job that no kernel follows is logged
here instead, as the panel polls it (its tab's metrics): the same
:class:`~..runner.track.TrackingSink` fed the job's new lines, once per poll, and at its
end the same :func:`~..runner.track.finished` (result, each rank's log, final state). One
process at a time logs a job (:func:`~..store.records.hold`): while a kernel follows it, the
server sends nothing, and the one that takes over reads what was sent from the job's record,
so no point goes twice. A job the panel stopped polling for :data:`IDLE_S` is let go (what
was read is sent first), so a kernel that attaches later can log it.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..backends.base import Job
from ..backends.capabilities import job_shape
from ..pod.protocol import LogLine, parse_line
from ..store.records import read_run
from . import track as session

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..jobs import JobStatus

__all__ = ["ServerTracking"]

IDLE_S = 120.0
POLL_S = 1.0  # at most this often per job (the panel polls its tab every second)
RETRY_S = 10.0  # a job another process logs: asked again this often
LOG = logging.getLogger("jupyter_ktrain.tracking")


def _say(text: str) -> None:
    """What the kernel would say in the cell goes to the server's log (warnings as such)."""
    LOG.log(logging.WARNING if text.startswith("warning") else logging.INFO, "%s", text)


class _Quiet:
    """The sink a server-side follow passes its lines on to: none (the panel reads its own)."""

    def lines(self, replica: str, lines: list[LogLine]) -> None:
        return None

    def status(self, status: JobStatus) -> None:
        return None


class _Followed:
    """One job this server logs: its sink, and how far into each replica's log it read."""

    def __init__(self, job: Job, sink: session.TrackingSink, started: float | None) -> None:
        self.job, self.sink, self.started = job, sink, started
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()
        self.polled = self.read_at = time.monotonic()
        self.done = False

    def poll(self, status: JobStatus, say: Callable[[str], None]) -> None:
        """Feed the lines stored since the last poll; at the job's end, finish the run."""
        if not self.lock.acquire(blocking=False):
            return  # another handler thread is at it
        try:
            if self.done or (not status.terminal and time.monotonic() - self.read_at < POLL_S):
                return
            self.read_at = time.monotonic()
            self._feed(status.terminal)
            self.sink.status(status)
            self.sink.tick()
            if status.terminal:
                self.done = True  # the end is sent in the background: no poll waits on it
                end = (self.sink, self.job, status, say)
                threading.Thread(target=session.finished, args=end, daemon=True).start()
        finally:
            self.lock.release()

    def _feed(self, terminal: bool) -> None:
        new: dict[str, list[str]] = {}
        for _t, replica, index, line in self.job.backend.read_logs_from(self.job.name, self.counts):
            new.setdefault(replica, []).append(line)
            self.counts[replica] = index + 1
        for replica, lines in new.items():
            if not terminal:  # a running replica's last line may be half written: read again
                lines.pop()
                self.counts[replica] -= 1
            if lines:
                self.sink.lines(replica, [parse_line(line) for line in lines])

    def let_go(self) -> None:
        """Stop logging (the panel no longer follows): send what was read, then give back."""
        with self.lock:
            if not self.done:
                self.done = True
                session.detached(self.sink)


class ServerTracking:
    """The jobs this server logs, started by :meth:`poll` (the panel's metrics poll)."""

    def __init__(self, say: Callable[[str], None] = _say) -> None:
        self.say = say
        self._jobs: dict[tuple[str, str], _Followed] = {}
        self._tried: dict[tuple[str, str], float] = {}  # not ours to log, when last asked
        self._lock = threading.Lock()
        self._mlflow = importlib.util.find_spec("mlflow") is not None

    def poll(self, backend: Backend, name: str, status: JobStatus) -> None:
        """The panel polled job ``name``: log it if it is tracked, not finished, and no other
        process logs it now."""
        key = (backend.name, name)
        with self._lock:
            followed = self._jobs.get(key)
            if followed is not None and followed.started is None:
                followed.started = status.started  # first polled before it started
            if followed is not None and (followed.done or followed.started != status.started):
                del self._jobs[key]  # ended, or a new job of the name
                followed.let_go()  # what was read is sent, and the job given back
                followed = None
            if followed is None:
                if not self._mlflow or time.monotonic() - self._tried.get(key, -RETRY_S) < RETRY_S:
                    return
                followed = self._start(backend, name, status)
                if followed is None:
                    self._tried[key] = time.monotonic()
                    return
                self._jobs[key] = followed
            followed.polled = time.monotonic()
            idle = [(k, f) for k, f in self._jobs.items() if time.monotonic() - f.polled > IDLE_S]
            for k, _f in idle:
                del self._jobs[k]
        followed.poll(status, self.say)
        for _k, f in idle:
            f.let_go()

    def _start(self, backend: Backend, name: str, status: JobStatus) -> _Followed | None:
        record = read_run(backend.name, name)
        if record is None or record.mlflow is None or record.mlflow.finished:
            return None  # untracked, or all sent: nothing to do (and no lock to take)
        job = Job(name, backend, shape=job_shape(backend, name))  # its ranks: each one's log
        sink = session.sink_for(job, _Quiet(), self.say)
        if not isinstance(sink, session.TrackingSink):
            return None  # another process logs it
        LOG.info("MLflow: the Jupyter server logs job %r while the side panel follows it", name)
        return _Followed(job, sink, status.started)

    def close(self) -> None:
        """Let every job go (the server stops)."""
        with self._lock:
            jobs, self._jobs = list(self._jobs.values()), {}
        for f in jobs:
            f.let_go()
