"""A local job's hangs, watched where its state is kept: in its supervisor, whether a cell follows
the job or not (detached, or never followed), so ``%ktrain status`` and the side panel say it.

The same watch as a followed job's model (:class:`~jupyter_ktrain.hangs.HangWatch`, fed each
rank's lines and steps as the supervisor copies them): on a hang, every rank's stack is taken
once (the ranks answer on their sockets, :mod:`jupyter_ktrain.pod.stacks`) and what is said of
it, with the stacks, is kept in the job store (``hang.json``, :func:`~jupyter_ktrain.store.
records.keep_hang`); forgotten when the named ranks move again, at a restart and at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ....hangs import Hang, HangWatch, hang_said
from ....pod.protocol import Stack
from ....pod.stacks import ask, stacks_text

__all__ = ["CHECK_S", "JobHangs", "asked"]

CHECK_S = 0.5  # how often the watch looks


class JobHangs:
    """One job's hang watch (module docstring). ``keep``: where what is said goes (a dict, or
    None to forget); ``stacks``: every rank's stack (None: the job's ranks cannot show theirs).
    ``heard`` may be called from any thread."""

    def __init__(
        self,
        name: str,
        after: float | None,
        world: int,
        nproc: int,
        keep: Callable[[dict[str, Any] | None], None],
        stacks: Callable[[], list[Stack]] | None,
    ) -> None:
        self.name = name
        self.nproc = max(1, nproc)
        self._watch = HangWatch(after)
        self._watch.world = world
        self._keep = keep
        self._stacks = stacks
        self._lock = threading.Lock()
        self._hang: Hang | None = None
        self._asked: set[tuple[int, ...]] = set()
        self._kept: str | None = ""  # "": nothing said yet (an earlier job's is forgotten)
        self._said_lock = threading.Lock()
        self._checked = 0.0
        self.started: float | None = None  # the job's start, as its state says (hang.json)

    def heard(self, rank: int, step: int | None, now: float) -> None:
        """Rank ``rank`` made progress (a line; a record at ``step``)."""
        with self._lock:
            self._watch.heard(rank, now, step)
            moved = self._hang is not None and rank in self._hang.ranks
            if moved:  # a hang named again later gets its stacks taken again
                self._hang, self._asked = None, set()
        if moved:
            self._say(None)

    def start(self, now: float, started: float) -> None:
        """The nodes started (the first attempt, or a restart's): a hang counts from ``now``."""
        with self._lock:
            self.started = started
            self._watch.forget(now)
            self._watch.start(now)
            self._hang, self._asked = None, set()
        self._say(None)

    def stop(self) -> None:
        """The job ended: it hangs no more."""
        with self._lock:
            self._hang = None
        self._say(None)

    def check(self, now: float) -> None:
        """Name a new hang (at once; again with where each rank waits once its stacks, taken
        once in a thread, are in), or forget one that ended. Called from the supervisor's
        loop, at most every :data:`CHECK_S`."""
        if now - self._checked < CHECK_S:
            return
        self._checked = now
        with self._lock:
            hang = self._watch.check(now)
            if (hang and hang.ranks) == (self._hang and self._hang.ranks):
                return
            self._hang = hang
            if hang is None:
                self._asked = set()
            new = hang is not None and hang.ranks not in self._asked
            if hang is not None:
                self._asked.add(hang.ranks)
        if hang is None:
            self._say(None)
            return
        self._say(self._said(hang, None, now))
        if new and self._stacks is not None:
            threading.Thread(target=self._take, args=(hang, self._stacks), daemon=True).start()

    def _take(self, hang: Hang, take: Callable[[], list[Stack]]) -> None:
        try:
            got = take()
        except Exception as exc:  # the hang is still named; only its stacks are missing
            got = [Stack(r, why=f"its stack could not be taken: {exc}") for r in hang.ranks]
        with self._lock:
            if self._hang is not hang:  # it moved while its stacks were taken
                return
        self._say(self._said(hang, got, time.time()))

    def _said(self, hang: Hang, got: list[Stack] | None, now: float) -> dict[str, Any]:
        stacks = None if got is None else {s.rank: s for s in got if s.rank is not None}
        where = {r: f"node {r // self.nproc}" for r in hang.steps}
        _, text = hang_said(hang, stacks, where, self.name)
        whole = stacks_text(self.name, [("", s) for s in got]) if got else ""
        return {"started": self.started, "t": now, "text": text, "stacks": whole}

    def _say(self, said: dict[str, Any] | None) -> None:
        text = None if said is None else said["text"]
        with self._said_lock:
            if text == self._kept:
                return
            self._kept = text
            self._keep(said)


def asked(folder: str | None) -> Callable[[], list[Stack]] | None:
    """Every rank's stack from the job's socket folder (None: the plan names none)."""
    return None if not folder else (lambda: ask(folder))
