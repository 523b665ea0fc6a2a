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

import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from ..config import Config, load_config
from ..errors import JobNotFound, KtrainError, SpecError
from ..jobs import CANCELLED, DELETED_REASON
from ..runner import verbs
from ..runner.feeds import JobFeeds
from ..runner.track_detached import ServerTracking
from ..spec.job import check_job_name
from ..tracking.side_by_side import entry
from .build import job_detail, job_summary, metrics_payload
from .compare_payload import compare_payload
from .payloads import (
    BackendProblem,
    ComparePayload,
    JobDetail,
    JobsPayload,
    JobSummary,
    LogLinePayload,
    LogsPayload,
    MetricsPayload,
    ProfileShown,
    StacksPayload,
    SweepDetail,
    SweepsPayload,
)
from .sweep_payloads import sweep_payload, sweeps_payload

if TYPE_CHECKING:
    from ..jobs import JobStatus
    from ..runner.verbs import Backend

__all__ = [
    "DEFAULT_BACKENDS",
    "PanelCore",
    "decode_offset",
    "encode_offset",
    "http_status",
    "profile_shown",
]

_LOG = logging.getLogger("jupyter_ktrain.tracking")
DEFAULT_BACKENDS = ("local",)
MAX_LINES = 5_000
PLOT_POINTS = 500
_OFFSET_RE = re.compile(r"^[-.a-z0-9]+:\d+(,[-.a-z0-9]+:\d+)*$")


def get_backend_by_name(name: str) -> Backend:
    return verbs.open_backend(name)


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


class PanelCore:
    """The API over ``backends`` (asked in order; a job's name is looked up in each).

    ``backends`` maps a backend name to a factory, so a backend whose client cannot be set up
    (no kubeconfig) is reported per call instead of breaking the others."""

    def __init__(
        self,
        backends: Mapping[str, Callable[[], Backend]] | Callable[[], Mapping[str, Hashable]],
        clock: Callable[[], float] = time.time,
        max_lines: int = MAX_LINES,
        plot_points: int = PLOT_POINTS,
        make: Callable[[str, Hashable], Backend] | None = None,
    ) -> None:
        """``backends``: name -> factory (fixed), or a function asked on every request that
        returns name -> setting key, with ``make(name, key)`` building a backend; a backend
        is made once per (name, key), so a changed setting (the user's config) takes effect at
        the next request and an unchanged one keeps its connections and watches."""
        if callable(backends):
            self._resolve = backends
            self._make = make or (lambda name, _key: get_backend_by_name(name))
        else:
            fixed = dict(backends)
            self._resolve = lambda: {name: name for name in fixed}
            self._make = lambda name, _key: fixed[name]()
        self._made: dict[tuple[str, Hashable], Backend] = {}
        self._lock = threading.Lock()  # handlers call from a thread pool
        self.feeds = JobFeeds(clock, max_lines, plot_points)  # log pages, metric models
        self.clock = clock
        self.tracking = ServerTracking()  # detached jobs the panel follows, logged to MLflow
        self.max_lines = max_lines
        self.plot_points = plot_points

    @classmethod
    def from_names(cls, names: Iterable[str] = DEFAULT_BACKENDS) -> PanelCore:
        """Backends by name through :func:`jupyter_ktrain.runner.verbs.open_backend`."""
        fixed = tuple(names)
        return cls(lambda: {n: n for n in fixed})

    @classmethod
    def from_config(cls, names: Callable[[], Iterable[str]]) -> PanelCore:
        """The backends ``names()`` lists, each set up from the user's config
        (``~/.ktrain/config.yaml``) as it is at each request: `%ktrain config
        backend=kubernetes context=...` shows in the open panel at its next refresh."""

        def resolve() -> dict[str, Hashable]:
            config = load_config()
            return {n: (config if n == "kubernetes" else n) for n in names()}

        def make(name: str, key: Hashable) -> Backend:
            return verbs.open_backend(name, key if isinstance(key, Config) else None)

        return cls(resolve, make=make)

    @property
    def _factories(self) -> Mapping[str, Hashable]:
        """The backends served now: name -> setting key (see ``__init__``)."""
        return self._resolve()

    def _backend(self, name: str, keys: Mapping[str, Hashable] | None = None) -> Backend:
        key = (keys if keys is not None else self._factories)[name]
        with self._lock:
            backend = self._made.get((name, key))
            if backend is None:
                backend = self._made[(name, key)] = self._make(name, key)
            return backend

    def _find(self, name: str, backend: str | None) -> tuple[str, JobStatus]:
        """(backend name, status) of job ``name``; JobNotFound when no backend knows it."""
        check_job_name(name)
        served = self._factories
        if backend is not None and backend not in served:
            known = ", ".join(served)
            raise SpecError(f"backend {backend!r} is not served by this panel (it has: {known}).")
        for b in [backend] if backend else list(served):
            try:
                return b, verbs.status(self._backend(b, served), name)
            except JobNotFound:
                continue
            except KtrainError:
                if backend is not None or len(served) == 1:
                    raise
                continue  # an unreachable cluster must not hide a local job of that name
        raise JobNotFound(
            f"No job named {name!r} on {' or '.join(served)}. "
            f"The panel's refresh button (or `%ktrain list`) shows the jobs that exist."
        )

    # -- the five calls -----------------------------------------------------------------
    def jobs(self) -> JobsPayload:
        now = self.clock()
        served = self._factories
        found = verbs.list_jobs((b, partial(self._backend, b, served)) for b in served)
        jobs: list[JobSummary] = [job_summary(s, b, now) for b, s in found.jobs]
        problems: list[BackendProblem] = [{"backend": b, "error": e} for b, e in found.problems]
        jobs.sort(key=lambda j: -(j["started"] or now))
        return {"jobs": jobs, "problems": problems, "now": now}

    def job(self, name: str, backend: str | None = None) -> JobDetail:
        return self._detail(*self._find(name, backend))

    def _detail(self, b: str, status: JobStatus) -> JobDetail:
        return job_detail(status, b, self.clock(), self._failure(b, status))

    def _failure(self, backend: str, status: JobStatus) -> str | None:
        """The cell's failure summary (first failing rank, kind, last lines), or None."""
        return verbs.failure(self._backend(backend), status)

    def logs(
        self,
        name: str,
        *,
        rank: int | None = None,
        grep: str | None = None,
        offset: str | None = None,
        backend: str | None = None,
        ranks: Collection[int] | None = None,
    ) -> LogsPayload:
        """Lines after ``offset`` (a cursor from a previous call), filtered by ``rank`` and
        ``grep`` (a plain substring, case-sensitive, like ``%ktrain logs --grep``), shown as
        the widget shows them (``ranks``: only those ranks' lines and the lines of no rank,
        the agent's and the launcher's: a big job's rank filter): torchrun's reports and
        tear-down noise folded to one line each
        (:func:`~jupyter_ktrain.monitor.torchrun.fold_stored`), a Trainer line several ranks
        printed shown once, under the lowest of them.

        While the job runs, each replica's last stored line is held back (it may be a line
        still being written), and so is a block the fold has not seen the end of; they come
        with the next call, or once the job has ended."""
        b, status = self._find(name, backend)
        page = self.feeds.page(
            self._backend(b), b, name, status, decode_offset(offset), rank, grep, ranks
        )
        lines: list[LogLinePayload] = [
            {"label": line.label, "rank": line.rank, "source": line.source, "text": line.text}
            for line in page.lines
        ]
        return {
            "lines": lines,
            "next_offset": encode_offset(page.counts),
            "more": page.more,
            "terminal": page.terminal,
        }

    def metrics(self, name: str, backend: str | None = None) -> MetricsPayload:
        """The job's panels and values reported once (``ktrain.report`` and agent GPU
        records), from a model kept per job and fed only the lines stored since the last
        call: a poll costs the new lines, not the job's age."""
        b, status = self._find(name, backend)
        with self.feeds.model(self._backend(b), b, name, status) as model:
            payload = metrics_payload(model, self.plot_points)
        hang = verbs.kept_hang(self._backend(b), name, status)
        if hang is not None:
            # what the cell that follows the job says of a hang, with the stacks it took
            payload["warnings"].append(str(hang.get("text", "")))
            payload["stacks"] = str(hang.get("stacks", ""))
            payload["version"] = hash((payload["version"], payload["stacks"], hang.get("t")))
        payload["profile"] = profile_shown(b, name)
        if payload["profile"] is not None:
            payload["version"] = hash((payload["version"], payload["profile"]["t"]))
        try:  # a tracked job no kernel follows goes to MLflow from here; never the panel's fault
            self.tracking.poll(self._backend(b), name, status)
        except Exception:
            _LOG.warning("MLflow logging of %r from the server failed", name, exc_info=True)
        return payload

    def trace(self, name: str, rank: int, backend: str | None = None) -> Path:
        """Rank ``rank``'s Chrome trace of job ``name``'s last profile (the file to serve);
        JobNotFound when it has none."""
        b, _ = self._find(name, backend)
        return verbs.trace(b, name, rank)

    def compare(
        self, names: list[str], metric: str | None = None, backend: str | None = None
    ) -> ComparePayload:
        """``%ktrain compare``'s comparison of ``names`` (jobs of one backend, or runs of its
        warm jobs: ``NAME:N``), for the panel."""
        found = {self._find(entry(name).job, backend)[0] for name in names}
        if len(found) > 1:
            raise SpecError(
                f"{', '.join(names)} are jobs of {' and '.join(sorted(found))}: compare jobs "
                "of one backend."
            )
        b = found.pop() if found else (backend or next(iter(self._factories)))
        c = verbs.compare(self._backend(b), names, metric)
        return compare_payload(b, c, self.plot_points)

    def stacks(
        self, name: str, rank: int | None = None, backend: str | None = None
    ) -> StacksPayload:
        """Every running rank's stack now (or one rank's), as ``%ktrain stacks`` shows them;
        an ended job, a rank it does not have: one line (400)."""
        b, _status = self._find(name, backend)
        return {"text": verbs.stacks(self._backend(b), name, rank), "t": time.time()}

    def sweeps(self) -> SweepsPayload:
        """Every sweep of the job store (its record, not a backend's)."""
        return sweeps_payload()

    def sweep(self, name: str) -> SweepDetail:
        return sweep_payload(name, self.plot_points)

    def cancel(self, name: str, backend: str | None = None) -> JobDetail:
        """Stop every process of the job; returns its status afterwards."""
        b, _status = self._find(name, backend)
        done = verbs.cancel(self._backend(b), name)
        if done.after is not None:  # as it is now (unchanged: it had already ended)
            return self._detail(b, done.after)
        assert done.before is not None
        gone = replace(  # a cluster job's cancel deletes it
            done.before,
            state=CANCELLED,
            reason=DELETED_REASON,
            message="cancelled: the job and its pods were deleted",
            replicas=(),
        )
        return self._detail(b, gone)


def profile_shown(backend: str, name: str) -> ProfileShown | None:
    """The job's last profile as the panel shows it (:func:`..runner.verbs.kept_profile`);
    None: none."""
    kept = verbs.kept_profile(backend, name)
    if kept is None:
        return None
    ranks = [r for r in kept.get("traces") or () if isinstance(r, int)]
    where = f"jobs/{quote(name)}/profile/"
    return {
        "text": str(kept.get("text", "")),
        "t": float(kept.get("t") or 0.0),
        "traces": [
            {"rank": r, "path": f"{where}{verbs.trace_name(r)}?backend={quote(backend)}"}
            for r in ranks
        ],
    }
