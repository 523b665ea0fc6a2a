"""The log lines a monitor shows: the first half of its model, what every view reads of logs.

:class:`LogBook` keeps each plain line as a :class:`LogEntry` in bounded ring buffers, one for
all ranks (``logs``, where a line several ranks printed alike is kept once: :mod:`.fold`) and
one per label (``rank_logs``: ``rank3``, ``agent@1``, :func:`log_label`), and counts the lines
that left a buffer before a reader saw them (older lines leave the view, never the log files).
:class:`~jupyter_ktrain.monitor.model.MonitorModel` is a log book that also reads records.
Pure: no I/O, not thread-safe.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from ..pod.protocol import LogLine
from .fold import RepeatFold, shown_text
from .glance import Level, line_level

__all__ = ["LogBook", "LogEntry", "log_label"]


def log_label(rank: int | None, source: str, node: int | None) -> str:
    """``rank3``, ``agent@1``, ``node@1`` (or ``agent``/``node`` when the node is unknown):
    a log line's label in every view (the cell, the widget, the panel)."""
    if rank is not None:
        return f"rank{rank}"
    return source if node is None else f"{source}@{node}"


@dataclass(frozen=True)
class LogEntry:
    """One log line as shown: ``seq`` is its arrival number, ``t`` the kernel time it came."""

    seq: int
    t: float
    text: str
    source: str = "rank"  # "rank" | "agent" | "node"
    rank: int | None = None
    node: int | None = None

    @property
    def label(self) -> str:
        """``rank3``, ``agent@1``, ``node@1`` (or ``agent``/``node`` when the node is unknown)."""
        return log_label(self.rank, self.source, self.node)


class LogBook:
    """A job's log lines as the views read them (see the module docstring)."""

    def __init__(self, max_lines: int = 10_000, max_lines_per_rank: int = 2_000) -> None:
        self.logs: deque[LogEntry] = deque(maxlen=max_lines)
        self.rank_logs: dict[str, deque[LogEntry]] = {}
        self._max_per_rank = max_lines_per_rank
        self.line_count = 0
        self.repeats_folded = 0  # Trainer log lines another rank had already printed
        self._fold = RepeatFold()
        self._seq = 0
        self._rank_left: dict[str, tuple[int, int]] = {}  # label -> (lines left, newest seq)
        self.lines_left = 0  # lines that left the all-ranks view (its buffer was full)
        self._left_seq = 0  # the newest of those
        self.ranks: set[int] = set()  # the ranks that printed a line
        self.flagged: dict[int, Level] = {}  # ranks that printed an error (or a warning)

    def labels(self) -> list[str]:
        """Log sources seen so far, ranks first in rank order."""

        def order(label: str) -> tuple[int, int, str]:
            if label.startswith("rank"):
                return (0, int(label[4:]), label)
            return (1, 0, label)

        return sorted(self.rank_logs, key=order)

    def lines_after(self, seq: int, label: str | None = None) -> Iterator[LogEntry]:
        """Entries newer than ``seq`` (all sources, or one ``label``), oldest first."""
        buf = self.logs if label is None else self.rank_logs.get(label, ())
        if not buf or buf[-1].seq <= seq:
            return iter(())
        if buf[0].seq > seq:
            return iter(buf)
        return (e for e in reversed(list(_tail_after(buf, seq))))

    def left_after(self, seq: int, label: str | None = None) -> int:
        """Whether lines newer than ``seq`` left the view (``label``'s, or all ranks') before a
        reader saw them: how many (0: none, every line after ``seq`` is still held). Lines
        folded as repeats (:mod:`.fold`) never count: they were not shown at all."""
        if label is None:
            return self.lines_left if self._left_seq > seq else 0
        left = self._rank_left.get(label)
        return left[0] if left is not None and left[1] > seq else 0

    def _keep_line(self, line: LogLine, now: float, node: int | None) -> None:
        """Keep a plain line that arrived at ``now`` from replica ``node``: in its label's
        buffer, and in the all-ranks one unless another rank printed it just before."""
        self._seq += 1
        self.line_count += 1
        entry = LogEntry(self._seq, now, shown_text(line.text), line.source, line.rank, node)
        if line.rank is not None:
            self.note_rank(line.rank, entry.text)
        if self._fold.repeat(line.rank, line.text, now):
            self.repeats_folded += 1
        else:
            if len(self.logs) == self.logs.maxlen:
                self.lines_left += 1
                self._left_seq = self.logs[0].seq
            self.logs.append(entry)
        buf = self.rank_logs.get(entry.label)
        if buf is None:
            buf = self.rank_logs[entry.label] = deque(maxlen=self._max_per_rank)
        if len(buf) == buf.maxlen:
            count = self._rank_left.get(entry.label, (0, 0))[0]
            self._rank_left[entry.label] = (count + 1, buf[0].seq)
        buf.append(entry)

    def note_rank(self, rank: int, text: str) -> None:
        """Note that ``rank`` printed ``text`` and whether it said an error or a warning (an
        error stays one); every kept line is noted (a reader that keeps no lines notes them
        here: the panel's metrics)."""
        self.ranks.add(rank)
        if self.flagged.get(rank) == "error":
            return
        level = line_level(text)
        if level is not None:
            self.flagged[rank] = level


def _tail_after(buf: deque[LogEntry], seq: int) -> Iterator[LogEntry]:
    """Entries with ``.seq > seq`` from the newest backwards (cheap for a short tail)."""
    for entry in reversed(buf):
        if entry.seq <= seq:
            return
        yield entry
