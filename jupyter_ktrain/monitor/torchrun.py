"""torchrun's own end-of-run reports, and the tracebacks of ranks that only lost a peer,
folded to one line each in the monitor.

When a rank fails, each node's torchrun prints a long traceback of its own code and a
``ChildFailedError`` banner whose "Root Cause" is whichever local process that node saw end
first: on the other nodes, a rank that was only stopped. Next to the cell's error (which names
the job's first failing rank and its own traceback) that banner says something false. A
torchrun stopped by a signal prints a ``SignalException`` traceback. Both are folded here into
one line; the node's log keeps them whole (``%ktrain logs NAME``). Any other traceback a node
prints passes through unchanged.

A rank whose collective broke because another rank or node died prints the traceback of that
broken connection (gloo's ends in "... GLHF!") and exits with the lost peer's code
(:data:`~jupyter_ktrain.pod.exits.PEER_LOST`). Between the lines that say which node died and
how the job restarts, it says nothing more than that: its traceback is held until the rank's
exit record, then shown as one line when the code is a lost peer's (whole otherwise, and
whole when the rank goes on after it: a traceback it printed and handled). The rank's log
keeps it whole. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..pod.exits import PEER_LOST, peer_lost_words
from ..pod.protocol import Exit, LogLine

__all__ = ["TorchrunFold", "child_failed_line", "lost_peer_line"]

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


def lost_peer_line(job: str, rank: int, traceback: Iterable[str]) -> str:
    """The one line shown for a rank's traceback of a lost peer: ``lost its peer (gloo:
    Connection reset by peer); its traceback: %ktrain logs JOB --rank 0``."""
    words = peer_lost_words("\n".join(traceback)) or "another rank or node ended"
    return f"lost its peer ({words}); its traceback: %ktrain logs {job} --rank {rank}"


_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


class _RankTraceback:
    """One rank's traceback, held: its lines, and whether its exception line came."""

    def __init__(self, first: LogLine) -> None:
        self.lines = [first]
        self.ended = False  # its exception line came: what follows is not part of it

    def add(self, line: LogLine) -> bool:
        """Hold ``line``; False when it cannot be part of the traceback (the rank went on)."""
        text = line.text
        self.lines.append(line)
        if len(self.lines) > _MAX_HELD:
            return False
        if text.strip() == _TRACEBACK:
            self.ended = False  # a chained exception's traceback
            return True
        if not text.strip() or text[0].isspace() or text.startswith(_CHAINED):
            return True
        if self.ended:
            return False
        self.ended = True  # the exception line
        return True


class TorchrunFold:
    """Feed one replica's parsed lines in order; get back what the monitor should show.
    Lines of the agent pass at once; a node traceback is held until its exception line tells
    whose it is, a rank's until its exit record or its next line tells whether it only lost a
    peer. ``flush()`` returns what is still held (at the job's end)."""

    def __init__(self, job: str) -> None:
        self.job = job
        self._held: list[LogLine] = []
        self._rules_left = 0  # inside a ChildFailedError banner: rules still to come
        self._banner_left = 0
        self._ranks: dict[int, _RankTraceback] = {}

    def feed(self, lines: Iterable[LogLine]) -> list[LogLine]:
        out: list[LogLine] = []
        for line in lines:
            if line.source == "rank" and line.rank is not None:
                self._rank_line(line.rank, line, out)
            elif line.source != "node":
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
        for rank in list(self._ranks):
            held += self._ranks.pop(rank).lines
        return held

    def _rank_line(self, rank: int, line: LogLine, out: list[LogLine]) -> None:
        held = self._ranks.get(rank)
        if held is None:
            if line.record is None and line.text.strip() == _TRACEBACK:
                self._ranks[rank] = _RankTraceback(line)
            else:
                out.append(line)
            return
        if line.record is None:
            if not held.add(line):  # not how the rank ended: show it as it came
                out.extend(self._ranks.pop(rank).lines)
            return
        del self._ranks[rank]
        record = line.typed
        lost = isinstance(record, Exit) and record.code == PEER_LOST
        if lost:
            text = lost_peer_line(self.job, rank, (x.text for x in held.lines))
            out.append(LogLine(text=text, rank=rank, source="rank"))
        else:
            out.extend(held.lines)
        out.append(line)

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
