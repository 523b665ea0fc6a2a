"""torchrun's own end-of-run reports, folded to one line each in the monitor.

When a rank fails, each node's torchrun prints a long traceback of its own code and a
``ChildFailedError`` banner whose "Root Cause" is whichever local process that node saw end
first: on the other nodes, a rank that was only stopped. Next to the cell's error (which names
the job's first failing rank and its own traceback) that banner says something false. A
torchrun stopped by a signal prints a ``SignalException`` traceback. Both are folded here into
one line; the node's log keeps them whole (``%ktrain logs NAME``). Any other traceback a node
prints passes through unchanged. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..pod.protocol import LogLine

__all__ = ["TorchrunFold", "child_failed_line"]

_TRACEBACK = "Traceback (most recent call last):"
_CHILD_FAILED = re.compile(r"^\S*ChildFailedError:")
_SIGNAL = re.compile(r"^\S*SignalException: Process \d+ got signal: (\d+)")
_RULE = re.compile(r"^={20,}\s*$")
_MAX_HELD = 400  # a traceback longer than this is not torchrun's: let it through
_MAX_BANNER = 200  # a banner without its closing rule ends here


def child_failed_line(job: str) -> str:
    """The one line shown for a node's ChildFailedError traceback and banner."""
    return (
        "torchrun: processes on this node ended with an error (its report, which names the "
        f"first one this node saw end: %ktrain logs {job})"
    )


class TorchrunFold:
    """Feed one replica's parsed lines in order; get back what the monitor should show.
    Lines of ranks and the agent pass at once; a node traceback is held until its exception
    line tells whose it is. ``flush()`` returns what is still held (at the job's end)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self._held: list[LogLine] = []
        self._rules_left = 0  # inside a ChildFailedError banner: rules still to come
        self._banner_left = 0

    def feed(self, lines: Iterable[LogLine]) -> list[LogLine]:
        out: list[LogLine] = []
        for line in lines:
            if line.source != "node":
                out.append(line)
            elif self._rules_left:
                self._in_banner(line, out)
            elif self._held:
                self._in_traceback(line, out)
            elif line.text.strip() == _TRACEBACK:
                self._held = [line]
            else:
                out.append(line)
        return out

    def flush(self) -> list[LogLine]:
        held, self._held, self._rules_left = self._held, [], 0
        return held

    def _in_traceback(self, line: LogLine, out: list[LogLine]) -> None:
        text = line.text
        if _CHILD_FAILED.match(text):
            self._held, self._rules_left = [], 2  # the banner opens and closes with a rule
            self._banner_left = _MAX_BANNER
            out.append(LogLine(text=child_failed_line(self.job), source="node"))
            return
        signal = _SIGNAL.match(text)
        if signal:
            self._held = []
            out.append(
                LogLine(text=f"torchrun: stopped by signal {signal.group(1)}", source="node")
            )
            return
        self._held.append(line)
        ended = bool(text.strip()) and not text[0].isspace()
        if ended or len(self._held) > _MAX_HELD:  # someone else's traceback: show it whole
            out.extend(self.flush())

    def _in_banner(self, line: LogLine, out: list[LogLine]) -> None:
        self._banner_left -= 1
        if _RULE.match(line.text):
            self._rules_left -= 1
        elif not self._banner_left:  # no closing rule after all: show what follows
            self._rules_left = 0
            out.append(line)
