"""What a reader that stays (the side panel's server) reads of a job between its polls: a page
of the job's log after a cursor, shown as the widget shows it (:meth:`JobFeeds.page`), and the
job's metrics model fed only the lines stored since the last poll (:meth:`JobFeeds.model`).
Each job's fold and model are kept between polls, the least used dropped.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..backends.base import Backend
from ..backends.capabilities import job_shape as shape_of
from ..jobs import JobShape, JobStatus
from ..monitor.fold import RepeatFold, shown_ranks, shown_text
from ..monitor.live import LogReplay
from ..monitor.logbook import log_label
from ..monitor.model import MonitorModel
from ..monitor.torchrun import fold_stored
from ..pod.protocol import RECORD_MARK, LogLine, parse_line

__all__ = ["MAX_FEEDS", "JobFeeds", "LogPage", "ShownLine"]

MAX_FEEDS = 32  # jobs whose metrics model (and log fold) a reader keeps between polls


@dataclass(frozen=True)
class ShownLine:
    """One line of a log page: its label (``[rank 1]``, ``[agent@node1]``), the rank it is
    shown under, where it came from (``stdout``, ``agent``...), its text as shown."""

    label: str
    rank: int | None
    source: str
    text: str


@dataclass(frozen=True)
class LogPage:
    """A page of a job's log: its lines, the cursor after them (lines read per replica),
    whether more is stored already (``more``), whether the log is whole (``terminal``)."""

    lines: list[ShownLine]
    counts: dict[str, int]
    more: bool
    terminal: bool


class JobFeeds:
    """The pages and models of the jobs one reader follows. ``clock`` stamps a line stored
    without a time; a page holds at most ``max_lines`` lines; a model's plots at most
    ``plot_points`` points."""

    def __init__(self, clock: Callable[[], float], max_lines: int, plot_points: int) -> None:
        self.clock = clock
        self.max_lines = max_lines
        self.plot_points = plot_points
        self._lock = threading.Lock()  # the server's handlers call from a thread pool
        self._feeds: dict[tuple[str, str], _MetricFeed] = {}
        self._folds: dict[tuple[str, str, float | None], RepeatFold] = {}

    def page(
        self,
        job: Backend,
        b: str,
        name: str,
        status: JobStatus,
        seen: dict[str, int],
        rank: int | None = None,
        grep: str | None = None,
        ranks: Collection[int] | None = None,
    ) -> LogPage:
        """Job ``name``'s lines on backend ``job`` (served as ``b``) after ``seen``, filtered
        by ``rank`` and ``grep`` (a plain substring, case-sensitive), shown as the widget
        shows them (``ranks``: only those ranks' lines and the lines of no rank): torchrun's
        reports and tear-down noise folded to one line each, a Trainer line several ranks
        printed shown once, under the lowest of them. While the job runs, each replica's last
        stored line is held back, and so is a block the fold has not seen the end of."""
        limit = 4 * self.max_lines  # raw lines per replica and call: a page's worth, filtered
        lines = job.read_logs_from(name, seen, limit)
        new, cut = _new_lines(lines, status.terminal, limit)
        counts = dict(seen)  # replicas in the order first read: node@K is the K-th
        for replica in new:
            counts.setdefault(replica, 0)
        nodes = {replica: k for k, replica in enumerate(counts)}
        streams = [
            _closed(
                replica,
                nodes[replica],
                fold_stored(name, rows, status.terminal and replica not in cut),
            )
            for replica, rows in new.items()
        ]
        # every replica's new lines, merged by the time they were written ("all ranks" reads
        # like one log); a backend without times keeps each replica's lines together
        merged = list(heapq.merge(*streams, key=_line_time))
        last = {s[-1][4]: s[-1][2] for s in streams if s and s[-1][4] in cut}
        whole = rank is None and ranks is None  # every rank: a line several printed, once
        fold = self._fold(b, name, status.started) if whole else None
        labels = self._labels(merged) if whole else {}
        out: list[ShownLine] = []
        more = False
        for i, (t, node, cursor, closes, replica, line) in enumerate(merged):
            if more:
                break
            if closes:  # a reader stops only where the fold was idle: nothing lost between
                counts[replica] = cursor
                # a replica read only in part: its unread lines may come before the others'
                more = last.get(replica) == cursor
            if line is None or line.record is not None or (rank is not None and line.rank != rank):
                continue
            if ranks is not None and line.rank is not None and line.rank not in ranks:
                continue
            # the widget's fold: a line several ranks printed alike is shown once
            when = t if t is not None else self.clock()
            if fold is not None and fold.repeat(line.rank, line.text, when):
                continue
            text = shown_text(line.text)
            if grep and grep not in text:
                continue
            shown = labels.get(i, line.rank)
            label = log_label(shown, line.source, node)
            out.append(ShownLine(label, shown, line.source, text))
            more = more or (closes and len(out) >= self.max_lines)
        return LogPage(out, counts, more, status.terminal and not more)

    def _labels(self, merged: list[_Shown]) -> dict[int, int | None]:
        """The rank each plain line of one read is shown under (:func:`shown_ranks`), where
        it is not its own."""
        plain = [
            (i, s[5]) for i, s in enumerate(merged) if s[5] is not None and s[5].record is None
        ]
        when = [s[0] if s[0] is not None else self.clock() for s in merged]
        ranks = shown_ranks([(line.rank, line.text, when[i]) for i, line in plain])
        return {i: r for (i, line), r in zip(plain, ranks, strict=True) if r != line.rank}

    @contextmanager
    def model(self, job: Backend, b: str, name: str, status: JobStatus) -> Iterator[MonitorModel]:
        """Job ``name``'s metrics model (backend ``job``, served as ``b``), fed the lines
        stored since the last call; held (no other thread feeds it) while in the ``with``."""
        feed = self._feed(job, b, name, status.started)
        with feed.lock:
            seen = feed.counts
            new, _ = _new_lines(job.read_logs_from(name, seen), status.terminal)
            for replica, lines in new.items():
                for _t, index, raw in lines:
                    if RECORD_MARK in raw:  # plain lines add nothing to the charts
                        feed.replay.feed(replica, raw)
                    else:  # but their ranks start a big job's log (a warning, an error)
                        line = parse_line(raw)
                        if line.rank is not None:
                            feed.replay.model.note_rank(line.rank, line.text)
                    seen[replica] = index + 1
                feed.counts = seen
            yield feed.replay.model

    def _fold(self, backend: str, name: str, started: float | None) -> RepeatFold:
        """The job's all-ranks fold (kept between polls: a repeat may come a poll later)."""
        with self._lock:
            key = (backend, name, started)
            fold = self._folds.pop(key, None) or RepeatFold()
            self._folds[key] = fold  # most recently used last
            while len(self._folds) > MAX_FEEDS:
                del self._folds[next(iter(self._folds))]
            return fold

    def _feed(self, job: Backend, backend: str, name: str, started: float | None) -> _MetricFeed:
        """The job's model (a new one for a new job of that name), the least used dropped."""
        key = (backend, name)
        with self._lock:
            feed = self._feeds.get(key)
        fresh = None
        if feed is None or feed.started != started:  # its kind read outside the lock (I/O)
            shape = shape_of(job, name)
            kind = shape.kind if shape else None
            fresh = _MetricFeed(name, started, kind, self.plot_points, backend, shape)
        with self._lock:
            feed = self._feeds.pop(key, None)
            if feed is None or feed.started != started:
                feed = fresh or _MetricFeed(name, started, None, self.plot_points, backend)
            self._feeds[key] = feed  # most recently used last
            while len(self._feeds) > MAX_FEEDS:
                del self._feeds[next(iter(self._feeds))]
            return feed


class _MetricFeed:
    """One job's metrics model in the server, and how far into each replica's log it is."""

    def __init__(
        self,
        name: str,
        started: float | None,
        kind: str | None,
        plot_points: int,
        backend: str = "",
        shape: JobShape | None = None,
    ) -> None:
        self.started = started
        self.replay = LogReplay(
            name,
            started,
            kind,
            backend,
            shape,
            plot_points=max(plot_points, 500),
            max_lines=1,
            max_lines_per_rank=1,
        )
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()


def _new_lines(
    lines: Iterable[tuple[float | None, str, int, str]], terminal: bool, limit: int | None = None
) -> tuple[dict[str, list[tuple[float | None, int, str]]], set[str]]:
    """``read_logs_from`` lines grouped by replica (first-seen order), and the replicas read
    only in part (``limit`` lines came). While the job runs, each replica's last stored line
    is held back: it may be a line still being written (and a part's last line comes again
    with the next part)."""
    groups: dict[str, list[tuple[float | None, int, str]]] = {}
    for t, replica, index, line in lines:
        groups.setdefault(replica, []).append((t, index, line))
    cut = {r for r, rows in groups.items() if limit is not None and len(rows) >= limit}
    for replica, rows in groups.items():
        if not terminal or replica in cut:
            rows.pop()
    return groups, cut


# one shown line of a replica: (time, node, read cursor, whether a reader may stop after it,
# replica, line or None: only the cursor moves)
_Shown = tuple[float | None, int, int, bool, str, LogLine | None]


def _closed(
    replica: str, node: int, lines: list[tuple[float | None, int, LogLine | None]]
) -> list[_Shown]:
    """A replica's shown lines, each marked where a reader may stop: after the last of the
    lines one cursor step decided (stopping inside would lose the rest)."""
    return [
        (t, node, cursor, k + 1 == len(lines) or lines[k + 1][1] != cursor, replica, line)
        for k, (t, cursor, line) in enumerate(lines)
    ]


def _line_time(item: _Shown) -> float:
    """Merge key: the line's time; without one, -inf keeps the replica's lines in order."""
    return item[0] if item[0] is not None else float("-inf")
