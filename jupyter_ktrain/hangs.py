"""Hangs, named: which rank stopped making progress, for how long, at which step.

A rank makes progress when it prints a line or reports (``ktrain.report``, a Trainer log).
:class:`HangWatch` is fed each rank's progress (:meth:`~HangWatch.heard`, with the step when
the record has one) and asked, on a timer, which ranks have made none for longer than their
limit (:meth:`~HangWatch.check`). The limit is ``after`` seconds when the user set one
(``--hang-after``), else the larger of 2 min and 10x the rank's own median step time (the
median gap between its lines when it reports no steps). Only a rank that used to make progress
(three times or more) can hang: one that printed once at the start is not "stuck".

Before any step (start-up: imports, the rendezvous, the first collective) the ranks are
watched as one: once the attempt started (:meth:`~HangWatch.start`, again at each restart) and
no rank reported a step, every rank of the world (``world``, those heard from or not) quiet for
``after`` seconds, else :data:`DEFAULT_START_HANG_S`, since the last line of any rank is a hang
of them all (``first``); the stacks then tell which never reached the collective the others
wait in. Before any rank printed (the nodes start torchrun, import, meet at the rendezvous), at
least :data:`START_FLOOR_S`: a slow start is not a hang. A job of one rank waits for no other:
it is never said to hang before its first step.

Who is named:

- some ranks stopped, the others go on: the stopped ones, with the step they are at and the
  step the others reached (while the others are no further on, nothing is said yet: the lines
  of ranks that stop together arrive a little apart);
- every rank stopped (they all wait on one collective): the ranks at the lowest step, when the
  steps differ (the others reached the next one and wait there); when every rank is at the
  same step, the stacks tell (:func:`stuck_outside_collectives`): the ranks that are not inside
  a collective never entered it.

Pure: no clock, no I/O (the caller passes ``now``).
"""

from __future__ import annotations

import re
import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from .pod.protocol import Stack

__all__ = [
    "DEFAULT_HANG_S",
    "DEFAULT_START_HANG_S",
    "START_FLOOR_S",
    "Hang",
    "HangWatch",
    "hang_in",
    "hang_said",
    "hang_text",
    "in_collective",
    "stack_summary",
    "stuck_outside_collectives",
]

DEFAULT_HANG_S = 120.0
# before the first step: imports, a data set's first shard, a model's download may print
# nothing for minutes; under NCCL's 10 min collective timeout, which would end the job unnamed
DEFAULT_START_HANG_S = 300.0
START_FLOOR_S = 60.0  # before any rank printed: what a loaded machine's start may take
STEP_FACTOR = 10.0  # times a rank's median step time
MIN_BEATS = 3  # progress seen this often before a rank can be said to hang
_KEEP = 50  # recent gaps kept per rank for its median

# where a rank that waits in a collective waits (the innermost frames of its main thread)
_CALL = re.compile(r"([A-Za-z_][\w.]*)\s*\(")  # the first call on a source line
_COLLECTIVE_FILES = ("torch/distributed/", "deepspeed/comm/", "torch/nn/parallel/distributed.py")


@dataclass
class _Pace:
    last: float
    beats: int = 1
    step: int | None = None
    step_at: float | None = None
    step_gaps: deque[float] = field(default_factory=lambda: deque(maxlen=_KEEP))
    line_gaps: deque[float] = field(default_factory=lambda: deque(maxlen=_KEEP))


@dataclass(frozen=True)
class Hang:
    """Ranks that made no progress for ``quiet`` seconds or more (``limit``: what they were
    allowed); ``every``: no rank of the job made progress; ``steps``: each rank's last step
    (None: it reported none); ``others``: the step the ranks that go on (or wait further on)
    reached."""

    ranks: tuple[int, ...]
    quiet: float
    limit: float
    every: bool
    steps: dict[int, int | None]
    others: int | None
    first: bool = False  # before any step: start-up, the rendezvous or the first collective

    @property
    def key(self) -> str:
        return ",".join(map(str, self.ranks))


class HangWatch:
    """Each rank's pace, and the ranks whose progress stopped (module docstring)."""

    def __init__(self, after: float | None = None) -> None:
        self.after = after
        self._paces: dict[int, _Pace] = {}
        self._since: float | None = None  # when this attempt's ranks started (start)
        self.world = 0  # the ranks of the job (0: unknown, only those heard from)

    def start(self, now: float, world: int = 0) -> None:
        """This attempt's ranks started at ``now`` (once; :meth:`forget` starts another);
        ``world``: how many ranks the job has, when known."""
        if self._since is None:
            self._since = now
        self.world = world or self.world

    def heard(self, rank: int, now: float, step: int | None = None) -> None:
        """Rank ``rank`` made progress at ``now`` (a line, or a record at ``step``)."""
        pace = self._paces.get(rank)
        if pace is None:
            self._paces[rank] = _Pace(now, step=step, step_at=now if step is not None else None)
            return
        if now > pace.last:
            pace.line_gaps.append(now - pace.last)
        pace.last = max(pace.last, now)
        pace.beats += 1
        if step is not None and step != pace.step:
            if pace.step_at is not None and pace.step is not None and step > pace.step:
                pace.step_gaps.append((now - pace.step_at) / (step - pace.step))
            pace.step, pace.step_at = step, now

    def forget(self, now: float | None = None) -> None:
        """A new attempt (a restart, a resume): every rank starts afresh (at ``now``: a
        restart's ranks start again, a resume's already run)."""
        self._paces.clear()
        if now is not None:
            self._since = now

    def limit(self, rank: int) -> float:
        """How long ``rank`` may make no progress before it is said to hang."""
        if self.after is not None:
            return self.after
        pace = self._paces.get(rank)
        gaps = (pace.step_gaps or pace.line_gaps) if pace is not None else ()
        typical = statistics.median(gaps) if gaps else 0.0
        return max(DEFAULT_HANG_S, STEP_FACTOR * typical)

    def check(self, now: float) -> Hang | None:
        """The ranks that hang now, or None."""
        first = self._check_start(now)
        if first is not None:
            return first
        steady = {r: p for r, p in self._paces.items() if p.beats >= MIN_BEATS}
        stopped = {r: p for r, p in steady.items() if now - p.last > self.limit(r)}
        if not stopped:
            return None
        steps = {r: p.step for r, p in self._paces.items()}
        every = all(now - p.last > self.limit(r) for r, p in steady.items())
        if every and len(self._paces) == len(steady):
            known = [s for s in steps.values() if s is not None]
            low = min(known) if known else None
            named = [r for r in stopped if steps[r] == low] if low is not None else []
            if low is not None and len(named) < len(stopped):
                others = max(known)
                return Hang(tuple(sorted(named)), _quiet(stopped, named, now),
                            min(self.limit(r) for r in named), True, steps, others)  # fmt: skip
            ranks = sorted(stopped)
            return Hang(tuple(ranks), _quiet(stopped, ranks, now),
                        min(self.limit(r) for r in ranks), True, steps, low)  # fmt: skip
        going = [s for r, s in steps.items() if r not in stopped and s is not None]
        mine = [s for r in stopped if (s := steps[r]) is not None]
        if going and mine and max(going) <= min(mine):
            return None  # the others are no further on: they may be stopping too (wait and see)
        ranks = sorted(stopped)
        return Hang(tuple(ranks), _quiet(stopped, ranks, now),
                    min(self.limit(r) for r in ranks), False, steps,
                    max(going) if going else None)  # fmt: skip

    def _check_start(self, now: float) -> Hang | None:
        """Before any step: every rank quiet for the start-up limit (module docstring)."""
        paces = self._paces
        if self._since is None or any(p.step is not None for p in paces.values()):
            return None
        ranks = sorted(set(range(self.world)) | set(paces))
        if len(ranks) < 2:  # one rank waits for no other: a quiet one is busy, not stuck
            return None
        last = max([self._since, *(p.last for p in paces.values())])
        limit = self.after if self.after is not None else DEFAULT_START_HANG_S
        if not paces:  # no rank printed yet: the nodes may still be starting
            limit = max(limit, START_FLOOR_S)
        if now - last <= limit:
            return None
        steps: dict[int, int | None] = dict.fromkeys(ranks)
        return Hang(tuple(ranks), now - last, limit, True, steps, None, first=True)


def hang_in(
    heard: Iterable[tuple[float, int, int | None]],
    after: float | None,
    world: int,
    since: float,
    now: float,
) -> Hang | None:
    """The hang a watch fed ``heard`` ((time, rank, step or None), in any order) would name at
    ``now``, this attempt's ranks started at ``since`` (what was heard before is of an earlier
    attempt): how a reader that follows nothing (a cluster job's status, detached) says one
    from the lines its pods stored, with their times."""
    watch = HangWatch(after)
    watch.start(since, world)
    for t, rank, step in sorted(heard, key=lambda h: h[0]):
        if t >= since:
            watch.heard(rank, t, step)
    return watch.check(now)


def _quiet(paces: dict[int, _Pace], ranks: Iterable[int], now: float) -> float:
    return min(now - paces[r].last for r in ranks)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def hang_text(hang: Hang, where: dict[int, str] | None = None) -> str:
    """What the views say of ``hang``; ``where`` names a rank's pod or node ("pod j-worker-1")."""
    where = where or {}
    named = ", ".join(f"rank {r} ({where[r]})" if r in where else f"rank {r}" for r in hang.ranks)
    verb = "has" if len(hang.ranks) == 1 else "have"
    head = f"{named} {verb} made no progress for {_duration(hang.quiet)}"
    at = sorted({s for r in hang.ranks if (s := hang.steps.get(r)) is not None})
    it = "it is" if len(hang.ranks) == 1 else "they are"
    if hang.every:
        if hang.others is not None and at and at[-1] < hang.others:
            return (f"{head}: every rank is stopped; the others reached step {hang.others} and "
                    f"wait there, {it} at step {at[-1]}")  # fmt: skip
        if len(hang.ranks) < len(hang.steps):
            before = " before its first step" if hang.first else ""
            return (f"{head}: every rank is stopped{before}, the others inside a collective, "
                    f"{it} not")  # fmt: skip
        if hang.first:
            return (f"{head}: every rank is stopped before its first step (a rendezvous or a "
                    "first collective that does not complete?)")  # fmt: skip
        step = f", all at step {at[0]}" if len(at) == 1 else ""
        return f"{head}: every rank is stopped{step} (a collective nobody left?)"
    if hang.others is not None and at:
        return f"{head}; the others are at step {hang.others}, {it} at {at[-1]}"
    return f"{head} while the others go on"


def hang_said(
    hang: Hang, stacks: dict[int, Stack] | None, where: dict[int, str], name: str
) -> tuple[Hang, str]:
    """What the views say of ``hang`` once the ranks' ``stacks`` are in (by rank; None before):
    when every rank is stopped, the ranks not inside a collective are the ones named; then
    where each named rank waits. ``where``: each rank's place ("node 1", "pod j-worker-1");
    ``name``: the job's. The hang as named, and the words (lines)."""
    asked = stacks is not None
    stacks = stacks or {}
    outside = stuck_outside_collectives(stacks.values())
    if hang.every and outside and set(outside) != set(hang.ranks):
        hang = replace(hang, ranks=tuple(outside))
    lines = [hang_text(hang, where)]
    for rank in hang.ranks:
        stack = stacks.get(rank)
        said = stack_summary(stack) if stack is not None else ""
        if said:
            lines.append(f"rank {rank} waits in {said}")
    if hang.first and asked and all(s.why for s in stacks.values()):
        lines.append("no rank answered: the nodes may wait in torchrun's rendezvous (a node "
                     "that never joined, a wrong MASTER_ADDR?)")  # fmt: skip
    if stacks:
        lines.append(f"(every rank's whole stack: %ktrain stacks {name})")
    return hang, "\n".join(lines)


def _innermost_user(frames: Sequence[tuple[str, int, str, str]]) -> int:
    """Index of the innermost frame in the user's code (a notebook cell or a file outside
    site-packages and the standard library); -1 when none."""
    for i in range(len(frames) - 1, -1, -1):
        file = frames[i][0]
        if file.startswith("cell [") or ("site-packages" not in file and "/lib/python" not in file):
            return i
    return -1


def stack_summary(stack: Stack) -> str:
    """One line for a rank's main thread: the call it waits in, back to the user's frame
    (``all_reduce <- train (cell [4], line 31)``); "" when there is no stack."""
    if stack.why or not stack.threads:
        return stack.why
    frames = stack.threads[0][1]
    if not frames:
        return ""
    mine = _innermost_user(frames)
    if mine < 0:
        file, line, function, _ = frames[-1]
        return f"{function} ({file}, line {line})"
    file, line, function, code = frames[mine]
    call = _CALL.search(code)
    called = call.group(1).rsplit(".", 1)[-1] if call else ""
    if not called and mine + 1 < len(frames):
        called = frames[mine + 1][2]
    user = f"{function} ({file}, line {line})"
    return f"{called} <- {user}" if called else user


def in_collective(stack: Stack) -> bool:
    """Whether the rank's main thread waits inside a collective (torch.distributed)."""
    if stack.why or not stack.threads:
        return False
    return any(any(m in f[0] for m in _COLLECTIVE_FILES) for f in stack.threads[0][1])


def stuck_outside_collectives(stacks: Iterable[Stack]) -> list[int]:
    """The ranks of ``stacks`` not inside a collective while others are: the ones the others
    wait for. [] when all are inside one, or none is."""
    stacks = [s for s in stacks if s.rank is not None and not s.why]
    inside = [s for s in stacks if in_collective(s)]
    if not inside or len(inside) == len(stacks):
        return []
    return sorted(s.rank for s in stacks if not in_collective(s) and s.rank is not None)
