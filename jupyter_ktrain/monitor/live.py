"""The path from a running job to what the user sees: follow loop -> model -> view.

:func:`model_for` builds the :class:`MonitorModel` of a job (header from its plan when there
is one, e.g. not after ``%ktrain attach``); :class:`ModelSink` is the follow loop's sink that
feeds that model and refreshes a view (the text view or the widget: one path for both).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..jobs import JobShape
from ..pod.protocol import LogLine, Stack, parse_line
from ..rank_stacks import stacks_text
from ..words import status_words
from .model import JobHeader, MonitorModel
from .torchrun import TorchrunFold

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import JobStatus, View

__all__ = [
    "LogReplay",
    "ModelSink",
    "model_for",
    "model_from_logs",
    "rdma_requested",
]

_NO_RDMA = frozenset({"", "tcp", "off", "none"})


def rdma_requested(spec: Any) -> bool:
    """True when the job asked for an RDMA network profile (not ``tcp``)."""
    rdma = getattr(spec, "rdma", None)
    return rdma is not None and str(getattr(rdma, "name", "")).lower() not in _NO_RDMA


def model_for(job: Job, **options: Any) -> MonitorModel:
    """A fresh model for ``job``; ``options`` go to :class:`MonitorModel`."""
    plan = job.plan
    header = JobHeader(name=job.name, backend=job.backend.name, run=job.run)
    rdma = False
    if plan is not None:
        spec = plan.spec
        header.shape = JobShape(spec.kind, spec.nodes, spec.nproc, spec.resources.gpus)
        header.image_digest = plan.request.image_digest
        rdma = rdma_requested(spec) and job.backend.rdma_capable
        options.setdefault("hang_after", spec.hang_after)
    elif job.shape is not None:  # attached later: the shape the backend stored
        header.shape = job.shape
    return MonitorModel(header, rdma_requested=rdma, **options)


class ModelSink:
    """A :class:`~jupyter_ktrain.monitor.follow_loop.Sink` that feeds ``model`` and refreshes
    ``view`` (throttled by the view itself). Call everything from one thread. torchrun's own
    failure reports are folded to one line each (:mod:`.torchrun`); a failed job's header says
    which rank failed first, not the backend's reason code."""

    def __init__(
        self,
        model: MonitorModel,
        view: View,
        clock: Callable[[], float] = time.time,
        *,
        stacks: Callable[[], list[tuple[str, Stack]]] | None = None,
        keep_hang: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> None:
        self.model = model
        self.view = view
        self.clock = clock
        self.final: JobStatus | None = None
        self._folds: dict[str, TorchrunFold] = {}
        # a hang's stacks: taken once per hang (``stacks``: the backend's, every rank), in a
        # thread so the view stays live; the hang said is kept for the side panel (keep_hang)
        self._stacks = stacks
        self._keep_hang = keep_hang
        self._asked: set[tuple[int, ...]] = set()
        self._got: queue.SimpleQueue[tuple[tuple[int, ...], list[tuple[str, Stack]], str]] = (
            queue.SimpleQueue()
        )
        self._kept: str | None = None

    def _node(self, replica: str) -> int:
        return self.model.node_of(replica)

    def lines(self, replica: str, lines: list[LogLine]) -> None:
        fold = self._folds.get(replica)
        if fold is None:
            fold = self._folds[replica] = TorchrunFold(self.model.header.name)
        self._feed(replica, fold.feed(lines))

    def _feed(self, replica: str, lines: list[LogLine]) -> None:
        now = self.clock()
        node = self._node(replica)
        for line in lines:
            self.model.feed(line, now, node)

    def status(self, status: JobStatus) -> None:
        now = self.clock()
        h = self.model.header
        for r in status.replicas:  # node numbers follow the replica table's order
            self._node(r.name)
        if status.started is not None and h.start_time is None:
            h.start_time = status.started
        if status.replicas and h.shape.nodes < len(status.replicas):
            h.shape = replace(h.shape, nodes=len(status.replicas))
        said = status_words(status, now, h.run)
        if status.terminal and status.finished is not None and h.end_time is None:
            h.end_time = status.finished
        self.model.set_state(status.state, now, said.message)
        # the backend's progress: the same the side panel shows (one truth: jupyter_ktrain.words)
        self.model.set_live(status.progress, said.restarting)
        self.model.set_replicas(said.replicas, now, max_restarts=status.max_restarts)
        for e in status.evictions:
            self.model.evicted(e.reason, e.text, e.count, now)
        if status.admitted_by:
            self.model.admitted(status.admitted_by, now)
        if status.dashboard:
            self.model.link(status.dashboard, now)
        if status.terminal:
            self.final = status

    def tick(self) -> None:
        """Once per follow iteration: time-based alerts, then a (throttled) redraw."""
        if self.final is not None:  # every line is in: nothing is held back any more
            for replica, fold in self._folds.items():
                self._feed(replica, fold.flush())
        now = self.clock()
        self.model.check(now)
        self._hang(now)
        self.view.update(now)

    def _hang(self, now: float) -> None:
        """Take a new hang's stacks (once), give them to the model, keep what it says."""
        hang = self.model.hang
        if hang is None:
            self._asked.clear()  # a hang named again later gets its stacks taken again
        if hang is not None and self._stacks is not None and hang.ranks not in self._asked:
            self._asked.add(hang.ranks)
            threading.Thread(
                target=self._take, args=(hang.ranks, self._stacks), daemon=True
            ).start()
        texts: dict[tuple[int, ...], str] = {}
        while not self._got.empty():
            ranks, got, whole = self._got.get()
            if self.model.hang is not None and self.model.hang.ranks == ranks:
                self.model.hang_stacks(got, now)
                texts[ranks] = whole
        said = [a.message for a in self.model.alerts() if a.code == "rank-hung"]
        text = said[0] if said else None
        if text == self._kept or self._keep_hang is None:
            return
        self._kept = text
        if text is None:
            self._keep_hang(None)
            return
        hang = self.model.hang
        whole = texts.get(hang.ranks, "") if hang is not None else ""
        start = self.model.header.start_time
        self._keep_hang({"started": start, "t": now, "text": text, "stacks": whole})

    def _take(self, ranks: tuple[int, ...], take: Callable[[], list[tuple[str, Stack]]]) -> None:
        try:
            got = take()
        except Exception as exc:  # the hang is still named; only its stacks are missing
            got = [("", Stack(r, why=f"its stack could not be taken: {exc}")) for r in ranks]
        self._got.put((ranks, got, stacks_text(self.model.header.name, got) if got else ""))


class LogReplay:
    """A model fed from stored lines as they come, replica by replica (the side panel feeds
    each poll's new lines only: its cost grows with the new lines, not with the job's age).

    Stored lines carry no arrival time: a record's is its ``t``, and a plain line gets the
    time of the record before it (before any, ``start_time``), never 0, which would make
    every series start in 1970. Without ``start_time``, the first record's time is the start.
    """

    def __init__(
        self,
        name: str,
        start_time: float | None = None,
        kind: str | None = None,
        backend: str = "",
        shape: JobShape | None = None,
        **options: Any,
    ) -> None:
        # the kind says how steps are read: a Ray driver's tasks report at once, out of order;
        # the whole shape (when known) how many ranks report each step
        if shape is None:
            shape = JobShape(kind=kind) if kind else JobShape()
        header = JobHeader(name=name, backend=backend, shape=shape, start_time=start_time)
        self.model = MonitorModel(header, **options)
        self._now = start_time

    def feed(self, replica: str, raw: str) -> None:
        self.feed_line(replica, parse_line(raw))

    def feed_line(self, replica: str, line: LogLine) -> None:
        t = _record_time(line)
        if t is not None:
            self._now = t
        now = self._now if self._now is not None else 0.0
        self.model.feed(line, now, self.model.node_of(replica))


def model_from_logs(
    name: str,
    lines: Iterable[tuple[str, str]],
    *,
    start_time: float | None = None,
    kind: str | None = None,
    **options: Any,
) -> MonitorModel:
    """A model rebuilt from a job's stored ``(replica, raw line)`` pairs (``read_logs``), for
    reports after the fact (:class:`LogReplay` at once). Metric x values are steps, or
    seconds since ``start_time`` (the job's start; default: its earliest record), like GPU
    series. ``kind``: the job's (``Backend.shape``), when known."""
    parsed = [(replica, parse_line(raw)) for replica, raw in lines]
    if start_time is None:
        times = [t for _, line in parsed if (t := _record_time(line)) is not None]
        start_time = min(times) if times else None
    replay = LogReplay(name, start_time, kind, **options)
    for replica, line in parsed:
        replay.feed_line(replica, line)
    return replay.model


def _record_time(line: LogLine) -> float | None:
    t = line.record.get("t") if line.record is not None else None
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None
