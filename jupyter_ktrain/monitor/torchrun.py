"""torchrun's own end-of-run reports, its tear-down noise, and the tracebacks of ranks that
only lost a peer, folded to one line each in every view (the widget and the cell's text through
:class:`~.live.ModelSink`, the side panel's log tab through the server, ``%ktrain logs``).

When a rank fails, each node's torchrun prints a long traceback of its own code and a
``ChildFailedError`` banner whose "Root Cause" is whichever local process that node saw end
first: on the other nodes, a rank that was only stopped. Next to the cell's error (which names
the job's first failing rank and its own traceback) that banner says something false. A
torchrun stopped by a signal prints a ``SignalException`` traceback. Both are folded here into
one line; the node's log keeps them whole (``%ktrain logs NAME --whole``). Any other traceback
a node prints passes through unchanged.

Tear-down noise: when one node's torchrun (the one that holds the rendezvous store) ends first,
the others' lose the store: C++ warnings of c10d (``[W... TCPStore.cpp] [c10d]
recvValueWithTimeout failed ...``) with their ``Exception raised from ...`` and ``frame #5:
c10d::TCPStore::doWait`` stacks, and, on a node whose ranks all finished, torchrun's logged
``Error waiting on exit barrier`` with its ``DistNetworkError`` traceback. The node's result
stands (torchrun waits at that barrier only after its ranks succeeded): the block is folded into
one line that says it is harmless (:func:`teardown_line`). torchrun's other logged lines (which
process it stopped, which one failed) lose the logger's prefix and the environment's path to
Python (:func:`torchrun_said`).

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
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..pod.exits import PEER_LOST, peer_lost_words
from ..pod.protocol import Exit, LogLine, format_agent_line, format_rank_line, parse_line

if TYPE_CHECKING:
    from ..backends.base import Job

__all__ = [
    "StoredLine",
    "TorchrunFold",
    "child_failed_line",
    "fold_stored",
    "fold_text",
    "job_logs",
    "lost_peer_line",
    "teardown_line",
    "torchrun_said",
]

# a stored line shown: (its time, the replica's read cursor once it is shown, the line); the
# line is None where only the cursor moves (lines the fold took in, shown as nothing or later)
StoredLine = tuple[float | None, int, LogLine | None]

_TRACEBACK = "Traceback (most recent call last):"
_CHILD_FAILED = re.compile(r"^\S*ChildFailedError:")
_SIGNAL = re.compile(r"^\S*SignalException: Process \d+ got signal: (\d+)")
_RULE = re.compile(r"^={20,}\s*$")
_MAX_HELD = 400  # a traceback longer than this is not torchrun's: let it through
_MAX_BANNER = 200  # a banner without its closing rule ends here
# tear-down noise: a c10d C++ warning of a lost store connection, its C++ stack, torchrun's
# logged "Error waiting on exit barrier" (each line under the logger's prefix)
_C10D_WARN = re.compile(r"^\[[WE]\d{4} [^\]]*\] \[c10d\] .*(TCPStore|[Rr]ecv|Connection)")
_CPP_STACK = re.compile(r"^(Exception raised from |frame #\d+: |<omitting python frames>)")
_LOG_PREFIX = re.compile(r"^[IWE]\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
_BARRIER = "Error waiting on exit barrier"
# torchrun's own one-line log messages, worded (a logger prefix and the environment's absolute
# path to Python say nothing to the user)
_FAILED = re.compile(
    r"^failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)(?: of binary: .*)?$"
)
_CLOSING = re.compile(r"^Sending process (\d+) closing signal (\w+)$")
_TORCH_LOGGER = re.compile(r"^[IWE]\d{4} [\d:.]+ +\d+ torch/distributed/\S+:\d+\] ")


def child_failed_line(job: str) -> str:
    """The one line shown for a node's ChildFailedError traceback and banner."""
    return (
        "torchrun: processes on this node ended with an error (its report, which names the "
        f"first one this node saw end: %ktrain logs {job} --whole)"
    )


def torchrun_said(text: str) -> str | None:
    """torchrun's own logged line (``E1125 10:18:40.533000 17703 torch/distributed/elastic/
    multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 17788) of binary:
    /.../bin/python``) as the views say it (``torchrun: local rank 1 (pid 17788) failed with
    exit code 1``); None for any other line."""
    prefix = _TORCH_LOGGER.match(text)
    if prefix is None:
        return None
    said = text[prefix.end() :].strip()
    failed = _FAILED.match(said)
    if failed:
        code, local, pid = failed.groups()
        how = (
            f"was killed by signal {-int(code)}"
            if int(code) < 0
            else f"failed with exit code {code}"
        )
        return f"torchrun: local rank {local} (pid {pid}) {how}"
    closing = _CLOSING.match(said)
    if closing:
        return f"torchrun: stopping process {closing.group(1)} ({closing.group(2)})"
    return f"torchrun: {said}"


def teardown_line(job: str, barrier: bool) -> str:
    """The one line shown for a node's tear-down noise (see the module's docstring);
    ``barrier``: it includes torchrun's ``Error waiting on exit barrier``."""
    whole = f"the whole text: %ktrain logs {job} --whole"
    if barrier:
        return (
            "torchrun: this node's ranks had finished; the rendezvous store was gone when it "
            "waited for the other nodes at the end (Error waiting on exit barrier, "
            f"DistNetworkError): harmless, the result stands ({whole})"
        )
    return (
        "torchrun: its connection to the rendezvous store closed (another node's torchrun "
        f"ended first): harmless in itself ({whole})"
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
        self._teardown: list[LogLine] = []  # a tear-down block, held until it ends
        self._barrier = ""  # the logger prefix of its "Error waiting on exit barrier"

    @property
    def idle(self) -> bool:
        """Nothing is held and no banner is open: what was fed so far is decided (a reader
        that stops here and starts a new fold at the next line shows the same)."""
        return not (self._held or self._rules_left or self._ranks or self._teardown)

    def feed(self, lines: Iterable[LogLine]) -> list[LogLine]:
        out: list[LogLine] = []
        for line in lines:
            if line.source == "rank" and line.rank is not None:
                self._rank_line(line.rank, line, out)
            elif line.source != "node":
                out.append(line)
            elif self._teardown and self._in_teardown(line):
                continue
            elif self._teardown:  # the block ended: its one line, then this line as any
                out.append(self._teardown_end())
                out.extend(self.feed([line]))
            elif self._starts_teardown(line):
                self._teardown = [line]
            elif self._rules_left:
                self._in_banner(line, out)
            elif self._held:
                self._in_traceback(line, out)
            elif line.text.strip() == _TRACEBACK:
                self._held = [line]
            else:
                said = torchrun_said(line.text)
                out.append(line if said is None else LogLine(text=said, source="node"))
        return out

    def flush(self) -> list[LogLine]:
        held, self._held, self._rules_left = self._held, [], 0
        if self._teardown:
            held.append(self._teardown_end())
        for rank in list(self._ranks):
            held += self._ranks.pop(rank).lines
        return held

    def _starts_teardown(self, line: LogLine) -> bool:
        text = line.text
        prefix = _LOG_PREFIX.match(text)
        if prefix and text[prefix.end() :].startswith(_BARRIER):
            self._barrier = prefix.group(0)
            return True
        return not self._held and bool(_C10D_WARN.match(text))

    def _in_teardown(self, line: LogLine) -> bool:
        """Whether node line ``line`` belongs to the tear-down block held (then it is held)."""
        if not self._starts_teardown(line):
            text = line.text
            own = self._barrier and text.startswith(self._barrier)
            if text.strip() and not own and not _CPP_STACK.match(text):
                return False
        self._teardown.append(line)
        return True

    def _teardown_end(self) -> LogLine:
        barrier, self._teardown, self._barrier = bool(self._barrier), [], ""
        return LogLine(text=teardown_line(self.job, barrier), source="node")

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


def fold_stored(
    job: str, rows: Sequence[tuple[float | None, int, str]], final: bool
) -> list[StoredLine]:
    """One replica's stored lines ``(time, index, raw)``, read from a cursor, as the views show
    them (:class:`TorchrunFold`), for a reader that reads again from a cursor (the side
    panel's server): each shown line with the cursor after the stored lines it was decided
    by. Lines the fold still holds at the end (a block that may go on) are left out, and the
    cursor stops before them, so the next read starts the fold there anew and shows the same;
    ``final`` (nothing more will come): they are flushed instead."""
    fold = TorchrunFold(job)
    out: list[StoredLine] = []
    pending: list[tuple[float | None, LogLine]] = []  # shown once the fold is idle again
    for t, index, raw in rows:
        pending += [(t, line) for line in fold.feed([parse_line(raw)])]
        if final and index == rows[-1][1]:
            pending += [(t, line) for line in fold.flush()]
        if fold.idle:
            out += [(when, index + 1, line) for when, line in pending] or [(t, index + 1, None)]
            pending = []
    return out


def fold_text(job: str, lines: Iterable[tuple[str, str]], grep: str | None = None) -> str:
    """Stored ``(replica, raw line)`` pairs as ``%ktrain logs`` shows every rank's plain lines
    (those holding ``grep``): as stored, with torchrun's reports and tear-down noise folded
    (:class:`TorchrunFold`, one per replica, as the other views fold them); what a fold still
    holds at the end is shown. (``Job.logs`` gives them as written.)"""
    folds: dict[str, TorchrunFold] = {}
    shown: list[LogLine] = []
    stored: dict[int, tuple[LogLine, str]] = {}  # a line as parsed (kept: its id stays its own)
    for replica, raw in lines:
        line = parse_line(raw)
        stored[id(line)] = (line, raw)
        shown += folds.setdefault(replica, TorchrunFold(job)).feed([line])
    for fold in folds.values():
        shown += fold.flush()
    out = [_stored(x, stored) for x in shown if x.record is None]
    return "".join(f"{text}\n" for text in out if grep is None or grep in text)


def _stored(line: LogLine, stored: dict[int, tuple[LogLine, str]]) -> str:
    """A shown line as stored: its own stored text, or a folded line with its prefix."""
    kept = stored.get(id(line))
    if kept is not None and kept[0] is line:
        return kept[1]
    if line.rank is not None:
        return format_rank_line(line.rank, line.text)
    return format_agent_line(line.text) if line.source == "agent" else line.text


def job_logs(job: Job, rank: int | None, grep: str | None, run: int | None, whole: bool) -> str:
    """``%ktrain logs``' text: every rank's lines as the other views show them
    (:func:`fold_text`); ``whole``, or one ``rank``'s: as written (``Job.logs``)."""
    if whole or rank is not None:
        return job.logs(rank=rank, grep=grep, run=run)
    return fold_text(job.name, job.read_logs(run), grep)
