"""What the side panel's REST API does, without Jupyter: pure functions over backends.

:class:`PanelCore` answers the five API calls from the generic
:class:`~jupyter_ktrain.backends.base.Backend` interface only (``list_jobs``, ``status``,
``read_logs``, ``cancel``), so any backend that implements it shows up in the panel. The
tornado handlers in :mod:`jupyter_ktrain.server.handlers` only parse the request and write what
this returns; :func:`http_status` is the one place that maps our errors to HTTP status.

Jobs survive kernel restarts because every call asks the backends afresh (the local backend
reads its on-disk registry); nothing is cached between calls.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..errors import JobNotFound, KtrainError, SpecError
from ..monitor.protocol import parse_line
from .payloads import (
    BackendProblem,
    JobDetail,
    JobsPayload,
    JobSummary,
    LogLinePayload,
    LogsPayload,
    MetricPanel,
    MetricsPayload,
    MetricTrace,
    ProgressPayload,
    ReplicaPayload,
)

if TYPE_CHECKING:
    from ..backends.base import Backend, JobStatus
    from ..monitor.downsample import StreamingDownsampler

__all__ = ["DEFAULT_BACKENDS", "PanelCore", "decode_offset", "encode_offset", "http_status"]

DEFAULT_BACKENDS = ("local",)
MAX_LINES = 5_000
PLOT_POINTS = 500
_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_OFFSET_RE = re.compile(r"^[-.a-z0-9]+:\d+(,[-.a-z0-9]+:\d+)*$")


def http_status(exc: BaseException) -> int:
    """The HTTP status of an error: unknown job 404, bad input 400, anything else 500."""
    if isinstance(exc, JobNotFound):
        return 404
    if isinstance(exc, SpecError):
        return 400
    return 500


def encode_offset(counts: Mapping[str, int]) -> str:
    """Cursor of a log read: lines already read per replica, ``"job-node-0:120,job-node-1:98"``."""
    return ",".join(f"{replica}:{n}" for replica, n in counts.items())


def decode_offset(offset: str | None) -> dict[str, int]:
    """Inverse of :func:`encode_offset`; ``""``/None is the start of every stream."""
    if not offset:
        return {}
    if not _OFFSET_RE.match(offset):
        raise SpecError(
            f"offset {offset!r} is not a log cursor: pass back the next_offset of the previous "
            f"logs response, or leave it out to read from the start."
        )
    pairs = (part.rsplit(":", 1) for part in offset.split(","))
    return {replica: int(n) for replica, n in pairs}


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise SpecError(
            f"{name!r} is not a job name: job names are lower-case letters, digits and '-' "
            f"(see `%ktrain list`)."
        )
    return name


def _summary(status: JobStatus, backend: str, now: float) -> JobSummary:
    started = status.started
    return {
        "name": status.name,
        "backend": backend,
        "state": status.state,
        "reason": status.reason,
        "message": status.message,
        "started": started,
        "finished": status.finished,
        "age_s": None if started is None else round(max(0.0, now - started), 1),
        "progress": _progress(status, now),
    }


def _progress(status: JobStatus, now: float) -> ProgressPayload | None:
    from ..monitor.text import progress_text

    p = status.progress
    if p is None:
        return None
    left = None if status.terminal else p.remaining(now)
    return {
        "step": p.step,
        "total": p.total,
        "percent": p.percent,
        "eta_s": None if left is None else round(left, 1),
        "text": progress_text(p, now, status.terminal),
    }


class PanelCore:
    """The API over ``backends`` (asked in order; a job's name is looked up in each).

    ``backends`` maps a backend name to a factory, so a backend whose client cannot be set up
    (no kubeconfig) is reported per call instead of breaking the others."""

    def __init__(
        self,
        backends: dict[str, Callable[[], Backend]],
        clock: Callable[[], float] = time.time,
        max_lines: int = MAX_LINES,
        plot_points: int = PLOT_POINTS,
    ) -> None:
        self._factories = dict(backends)
        self._made: dict[str, Backend] = {}
        self._lock = threading.Lock()  # handlers call from a thread pool
        self.clock = clock
        self.max_lines = max_lines
        self.plot_points = plot_points

    @classmethod
    def from_names(cls, names: Iterable[str] = DEFAULT_BACKENDS) -> PanelCore:
        """Backends by name through :func:`jupyter_ktrain.backends.get_backend`."""
        from ..backends import get_backend

        return cls({n: (lambda n=n: get_backend(n)) for n in names})  # type: ignore[misc]

    def _backend(self, name: str) -> Backend:
        with self._lock:
            backend = self._made.get(name)
            if backend is None:
                backend = self._made[name] = self._factories[name]()
            return backend

    def _find(self, name: str, backend: str | None) -> tuple[str, JobStatus]:
        """(backend name, status) of job ``name``; JobNotFound when no backend knows it."""
        _check_name(name)
        if backend is not None and backend not in self._factories:
            known = ", ".join(self._factories)
            raise SpecError(f"backend {backend!r} is not served by this panel (it has: {known}).")
        for b in [backend] if backend else list(self._factories):
            try:
                return b, self._backend(b).status(name)
            except JobNotFound:
                continue
            except KtrainError:
                if backend is not None or len(self._factories) == 1:
                    raise
                continue  # an unreachable cluster must not hide a local job of that name
        raise JobNotFound(
            f"No job named {name!r} on {' or '.join(self._factories)}. "
            f"The panel's refresh button (or `%ktrain list`) shows the jobs that exist."
        )

    # -- the five calls -----------------------------------------------------------------
    def jobs(self) -> JobsPayload:
        now = self.clock()
        jobs: list[JobSummary] = []
        problems: list[BackendProblem] = []
        for b in self._factories:
            try:
                statuses = self._backend(b).list_jobs()
            except KtrainError as exc:
                problems.append({"backend": b, "error": str(exc)})
                continue
            jobs.extend(_summary(s, b, now) for s in statuses)
        jobs.sort(key=lambda j: -(j["started"] or now))
        return {"jobs": jobs, "problems": problems, "now": now}

    def job(self, name: str, backend: str | None = None) -> JobDetail:
        b, status = self._find(name, backend)
        summary = _summary(status, b, self.clock())
        replicas: list[ReplicaPayload] = [
            {
                "name": r.name,
                "phase": r.phase,
                "restarts": r.restarts,
                "node": r.node,
                "exit_code": r.exit_code,
                "last_event": r.last_event,
            }
            for r in status.replicas
        ]
        return {
            **summary,
            "replicas": replicas,
            "exit_codes": {str(k): v for k, v in sorted(status.exit_codes.items())},
            "failed_rank": status.failed_rank,
            "terminal": status.terminal,
        }

    def logs(
        self,
        name: str,
        *,
        rank: int | None = None,
        grep: str | None = None,
        offset: str | None = None,
        backend: str | None = None,
    ) -> LogsPayload:
        """Lines after ``offset`` (a cursor from a previous call), filtered by ``rank`` and
        ``grep`` (a plain substring, case-sensitive, like ``%ktrain logs --grep``).

        While the job runs, each replica's last stored line is held back (it may be a line
        still being written); it comes with the next call, or once the job has ended."""
        b, status = self._find(name, backend)
        seen = decode_offset(offset)
        per_replica = _by_replica(self._backend(b).read_logs(name))
        out: list[LogLinePayload] = []
        counts: dict[str, int] = {}
        more = False
        for node, (replica, lines) in enumerate(per_replica.items()):
            start = seen.get(replica, 0)
            stop = len(lines) if status.terminal else max(start, len(lines) - 1)
            index = start
            while index < stop and not more:
                line = parse_line(lines[index])
                index += 1
                if line.record is not None or (rank is not None and line.rank != rank):
                    continue
                if grep and grep not in line.text:
                    continue
                label = f"rank{line.rank}" if line.rank is not None else f"{line.source}@{node}"
                out.append(
                    {"label": label, "rank": line.rank, "source": line.source, "text": line.text}
                )
                more = len(out) >= self.max_lines
            counts[replica] = index
        return {
            "lines": out,
            "next_offset": encode_offset(counts),
            "more": more,
            "terminal": status.terminal and not more,
        }

    def metrics(self, name: str, backend: str | None = None) -> MetricsPayload:
        """Metrics rebuilt from the stored logs (``ktrain.report`` and agent GPU records)."""
        from ..monitor.live import model_from_logs

        b, _status = self._find(name, backend)
        model = model_from_logs(name, self._backend(b).read_logs(name))
        panels: list[MetricPanel] = []
        for metric in model.metric_names():
            series = sorted((r, s) for (r, n), s in model.metrics.items() if n == metric)
            panels.append(
                {
                    "name": metric,
                    "x_title": "step",
                    "traces": [_trace(f"rank {r}", s, self.plot_points) for r, s in series],
                }
            )
        for field in sorted({f for _, _, f in model.gpus}):
            gpus = sorted(((n, g), s) for (n, g, f), s in model.gpus.items() if f == field)
            panels.append(
                {
                    "name": f"gpu {field}",
                    "x_title": "seconds",
                    "traces": [
                        _trace(f"node {n} GPU {g}", s, self.plot_points) for (n, g), s in gpus
                    ],
                }
            )
        return {"panels": panels}

    def cancel(self, name: str, backend: str | None = None) -> JobDetail:
        """Stop every process of the job; returns its status afterwards."""
        b, status = self._find(name, backend)
        if not status.terminal:
            self._backend(b).cancel(name)
        return self.job(name, b)


def _by_replica(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """``read_logs`` pairs grouped by replica, replicas in first-seen order."""
    groups: dict[str, list[str]] = {}
    for replica, line in pairs:
        groups.setdefault(replica, []).append(line)
    return groups


def _trace(label: str, series: StreamingDownsampler, points: int) -> MetricTrace:
    xs, ys = series.points(points)
    return {"label": label, "x": list(xs), "y": list(ys)}
