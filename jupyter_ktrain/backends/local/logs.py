"""Node logs read as they grow: :class:`FileLogSource` tails one node's log (complete lines,
from where the last read stopped); :class:`LogIndex` remembers where lines start, so a poll
seeks to the new part instead of reading the whole log again (``node-K.log`` with one time
stamp per line in ``node-K.times``, both written by the supervisor)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..logsource import LogSource

__all__ = ["FileLogSource", "LogIndex"]


class FileLogSource(LogSource):
    """Tails one node's log file: complete lines only, from where the last read stopped."""

    def __init__(self, path: Path, replica: str):
        self.path = path
        self.replica = replica
        self._offset = 0
        self._partial = b""
        self._eof = False

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        data = self._partial + chunk
        *lines, self._partial = data.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]

    def finish(self) -> list[str]:
        """Read what is left, including a last line without a newline."""
        lines = self.read()
        if self._partial:
            lines.append(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        self._eof = True
        return lines

    @property
    def done(self) -> bool:
        return self._eof


@dataclass(frozen=True)
class _Mark:
    """Line ``lines`` of a node log starts at byte ``log_at`` (its stamp at ``times_at``)."""

    lines: int
    log_at: int
    times_at: int
    ident: tuple[int, int]  # (inode, device): a log written anew starts from 0 again


class LogIndex:
    """Where lines start in the node logs read so far (a mark every ``every`` lines and at
    the end of each read), so a read seeks to the nearest mark before the line it wants and
    reads on from there. Thread-safe enough: marks are immutable, a lost update a re-read."""

    def __init__(self, every: int = 2_000, keep: int = 1_024, block: int = 1 << 20) -> None:
        self.every = every
        self.keep = keep
        self.block = block
        self._marks: dict[Path, list[_Mark]] = {}  # by line number
        self.bytes_read = 0  # what the reads cost, for the bench and tests

    def read(
        self, log: Path, times: Path, start: int, limit: int | None = None
    ) -> Iterator[tuple[float | None, int, str]]:
        """(time or None, index, line) of the lines from index ``start`` on (at most
        ``limit``), the last one also when it has no newline yet (``FileLogSource.finish``)."""
        try:
            ident = (log.stat().st_ino, log.stat().st_dev)
        except FileNotFoundError:
            return
        marks = [m for m in self._marks.get(log, ()) if m.ident == ident]
        k = bisect.bisect_right([m.lines for m in marks], start)
        mark = marks[k - 1] if k else _Mark(0, 0, 0, ident)
        stamps = _Stamps(times, mark.times_at)
        index, log_at = mark.lines, mark.log_at
        found: list[_Mark] = []
        before: _Mark | None = None
        shown = 0
        with open(log, "rb") as f:
            f.seek(log_at)
            rest = b""
            while limit is None or shown < limit:
                chunk = f.read(self.block)
                self.bytes_read += len(chunk)
                data = rest + chunk
                *complete, rest = data.split(b"\n")
                if not chunk:  # the end: a last line without its newline yet
                    complete, rest = ([rest] if rest else []), b""
                    stamps.whole = False  # (no mark after it)
                for raw in complete:
                    line_mark = _Mark(index, log_at, stamps.at, ident) if stamps.whole else None
                    t = stamps.next()
                    if index >= start and (limit is None or shown < limit):
                        shown += 1
                        yield t, index, raw.decode("utf-8", "replace")
                    if chunk:  # a whole line (newline seen)
                        before = line_mark  # where the last whole line starts
                        log_at += len(raw) + 1
                        index += 1
                        if index % self.every == 0 and stamps.whole:
                            found.append(_Mark(index, log_at, stamps.at, ident))
                if not chunk:
                    break
        if before is not None and before.lines > mark.lines:
            found.append(before)  # a poller holds the last line back: it starts there next
        if stamps.whole and index > mark.lines:
            found.append(_Mark(index, log_at, stamps.at, ident))
        if found:
            known = {m.lines: m for m in (*marks, *found)}
            self._marks[log] = [known[n] for n in sorted(known)][-self.keep :]


class _Stamps:
    """The ``node-K.times`` file read along with its log: one stamp per line."""

    def __init__(self, path: Path, at: int) -> None:
        try:
            with open(path, "rb") as f:
                f.seek(at)
                self._rows = f.read().split(b"\n")
        except OSError:
            self._rows = [b""]
        self._next = 0
        self.at = at  # byte offset after the stamps handed out
        self.whole = True  # every line so far had its stamp: ``at`` is a valid mark

    def next(self) -> float | None:
        if self._next >= len(self._rows) - 1:  # no complete stamp for this line (yet)
            self.whole = False
            return None
        raw = self._rows[self._next]
        self._next += 1
        if self.whole:
            self.at += len(raw) + 1
        return _stamp(raw)


def _stamp(raw: bytes) -> float | None:
    try:
        return float(raw)
    except ValueError:
        return None
