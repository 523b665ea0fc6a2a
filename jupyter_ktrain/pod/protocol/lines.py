"""One line of a node's stream, parsed: rank, agent or node, its text and its record (through
Ray's prefix of a task's line). Pure: no I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .record_types import Record, parse_record
from .wire import AGENT_PREFIX, _record

_RANK_RE = re.compile(r"^\[rank(\d+)\]: ?")
_ANSI = r"(?:\x1b\[[0-9;]*m)?"
# Ray's prefix of a line a task or actor printed (ray._private.worker.print_worker_logs)
_RAY_RE = re.compile(rf"^{_ANSI}\((?:[^()]* )?pid=\d+(?:, ip=[^()\s]+)?\){_ANSI} ")
_RAY_REPEATED_RE = re.compile(r" \[repeated \d+x across cluster\].*$")


@dataclass(frozen=True)
class LogLine:
    """One parsed line. ``rank`` is None for agent and node lines; ``record`` is the decoded
    structured record when the line carries one (then ``text`` is the raw JSON)."""

    text: str
    rank: int | None = None
    source: str = "rank"  # "rank" | "agent" | "node"
    record: dict[str, Any] | None = None

    @property
    def typed(self) -> Record | None:
        """The record as its dataclass (:func:`parse_record`); None for none or an unknown one."""
        return parse_record(self.record)


def _through_ray(text: str) -> str:
    """``text`` past Ray's prefix of a task's line (and its dedup note), else ``text``."""
    m = _RAY_RE.match(text)
    return _RAY_REPEATED_RE.sub("", text[m.end() :]) if m else text


def _line(text: str, rank: int | None, source: str) -> LogLine:
    body = _through_ray(text)
    record = _record(body)
    return LogLine(text=body if record is not None else text, rank=rank, source=source,
                   record=record)  # fmt: skip


def parse_line(line: str) -> LogLine:
    """Split one line (without its newline) into rank/agent/node, text and record."""
    ray = _RAY_RE.match(line)
    if ray:  # Ray's prefix outermost: a driver's own stdout, not the runtime's
        inner = parse_line(_through_ray(line))
        return inner if inner.record is not None else _line(line, inner.rank, inner.source)
    m = _RANK_RE.match(line)
    if m:
        return _line(line[m.end() :], int(m.group(1)), "rank")
    if line.startswith(AGENT_PREFIX):
        return _line(line[len(AGENT_PREFIX) :], None, "agent")
    return _line(line, None, "node")
