"""Progress and time left of a job, from the ``step``/``total`` of its records. Pure, stdlib.

A record with a ``total`` (``ktrain.report(step=i, total=n)``, or the Transformers Trainer
hook with ``global_step``/``max_steps``) says how far the job is. :class:`ProgressTracker`
turns a stream of such updates into a :class:`Progress`: percent done and an ETA that is
smoothed (an exponential average of seconds per step, so one slow step does not swing it) and
honest: ``eta_s`` is None ("unknown") until :data:`MIN_INTERVALS` intervals with steps in them
were measured, and while the total is unknown; the time left is unknown again when no step
came for much longer than steps take (a stalled job). After a resume (a ``resume`` record:
``ktrain.checkpoint().load()``), and after a step that went back, the rate is measured anew
from the steps that follow: the time the restart took is no step time, so the ETA is the rate
since the last resume (unknown until :data:`MIN_INTERVALS` of its steps were timed), not a
figure the restart's minutes inflated. The same tracker runs in the monitor model, in the local
supervisor (``state.json``), in the Kubernetes backend and in the job (the Trainer status
endpoint), so every view shows the same figures.

A record's ``step`` is the step just done, counted from 0 (``for step in range(total)``), so
``step + 1`` steps are done: a run that reports steps 0..59 of ``total=60`` ends at 100%
(60/60). (The Trainer's ``global_step`` counts from 1; it is capped at ``total``.) The time
left counts down between steps, never to "0s left" with steps to go: when no step came for
:data:`WAIT_STEPS` step times (at least :data:`WAIT_MIN_S`), the job is "waiting" for its next
step (a restart, a checkpoint, a slow collective), and the views say so instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .protocol import Metric, Resume

__all__ = [
    "MIN_INTERVALS",
    "STALE_S",
    "WAIT_MIN_S",
    "WAIT_STEPS",
    "JobProgress",
    "Progress",
    "ProgressTracker",
    "fmt_duration",
    "progress_short",
    "progress_text",
]

MIN_INTERVALS = 2
ALPHA = 0.3  # weight of the newest seconds-per-step measurement
STALE_S = 60.0  # with no step for this long (and 5 step times), the ETA is unknown again
WAIT_STEPS = 3.0  # with no step for this many step times (and WAIT_MIN_S) the job is waiting
WAIT_MIN_S = 2.0


_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


def fmt_duration(seconds: float, units: int = 2) -> str:
    """A length of time in its ``units`` largest units, the smaller ones two digits wide:
    ``42s``, ``3m 05s``, ``2h 07m``, ``1d 03h``; ``units=1`` for narrow columns and short
    lines: ``42s``, ``3m``, ``2h``, ``4d``. Rounded to the nearest of the last unit shown (a
    clock that must not run ahead passes whole seconds passed, ``int(elapsed)``). The one
    duration wording in Python; the side panel's ``age`` (``labextension/src/panel.ts``) is its
    TypeScript twin for ``units=1``."""
    s = max(0, int(seconds + 0.5))
    for _ in range(2):  # a second pass when rounding carried into a larger unit (59m 40s: 1h)
        first = next(i for i, (_, size) in enumerate(_UNITS) if s >= size or size == 1)
        shown = _UNITS[first : first + max(1, units)]
        last = shown[-1][1]
        s = (s + last // 2) // last * last
    parts = []
    for i, (unit, size) in enumerate(shown):
        value = s // size if i == 0 else s % shown[i - 1][1] // size
        parts.append(f"{value}{unit}" if i == 0 else f"{value:02d}{unit}")
    return " ".join(parts)


@dataclass(frozen=True)
class Progress:
    """Where a job stands at time ``t`` (epoch seconds of its last update).

    ``eta_s`` is the seconds left as of ``t`` (None: unknown); ``step_s`` the smoothed
    seconds per step (None until measured)."""

    step: int
    total: int | None
    t: float
    eta_s: float | None = None
    step_s: float | None = None
    # the rate is measured anew (its nodes restarted, it resumed, a step went back): until it is
    # known, the job is restarting, not waiting or of unknown ETA
    anew: bool = False

    @property
    def restarting(self) -> bool:
        """Restarted, and the new attempt's rate not known yet (see ``anew``)."""
        return self.anew and self.eta_s is None and not self.done

    @property
    def steps_done(self) -> int:
        """Steps done: ``step + 1`` (steps count from 0), at most ``total``."""
        done = max(0, self.step + 1)
        return done if self.total is None else min(done, self.total)

    @property
    def done(self) -> bool:
        return self.total is not None and self.steps_done >= self.total

    @property
    def percent(self) -> float | None:
        """0-100 (one decimal, and 100 only when the last step is done); None: unknown."""
        if not self.total or self.total <= 0:
            return None
        if self.done:
            return 100.0
        return min(99.9, max(0.0, int(1000 * self.steps_done / self.total) / 10))

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds left at ``now`` (the ETA counted down since ``t``); None when unknown, also
        once no step came for :data:`STALE_S` and five step times (a stalled job has no honest
        ETA). While steps remain it is never below one second: "0s left" would say done."""
        if self.done:
            return 0.0
        if self.eta_s is None:
            return None
        passed = 0.0 if now is None else max(0.0, now - self.t)
        if passed > max(STALE_S, 5 * (self.step_s or 0.0)):
            return None
        return max(1.0, self.eta_s - passed)

    def waiting_for(self, now: float | None) -> float | None:
        """Seconds since the last step when that is several step times (:data:`WAIT_STEPS`,
        at least :data:`WAIT_MIN_S`): the job waits for its next step, and its ETA does not
        count down. None while steps come (or before a step time is known, or when done)."""
        if now is None or self.step_s is None or self.done:
            return None
        passed = now - self.t
        return passed if passed > max(WAIT_MIN_S, WAIT_STEPS * self.step_s) else None

    def stalled_for(self, now: float | None) -> float | None:
        """Seconds since the last step when that is too long for the ETA to hold, else None."""
        if now is None or self.eta_s is None or self.done:
            return None
        passed = now - self.t
        return passed if passed > max(STALE_S, 5 * (self.step_s or 0.0)) else None

    def head(self) -> str:
        """``42% (420/1000)``, ``step 12`` (no total)."""
        pct = self.percent
        if pct is None:
            return f"step {self.step}"
        return f"{pct:g}% ({self.steps_done}/{self.total})"

    def describe(self, now: float | None = None, restarting: bool = False) -> str:
        """``42% (420/1000) · 1m 05s left``, ``step 12 · ETA unknown``; ``… · restarting``
        while the job restarts (``restarting``), ``… · waiting (no step for 9s)`` when no
        step came for several step times."""
        head = self.head()
        if self.percent is None:
            return f"{head} · ETA unknown"
        if self.done:
            return head
        if restarting or self.restarting:
            return f"{head} · restarting"
        stalled = self.stalled_for(now)
        waiting = self.waiting_for(now)
        if waiting is not None and stalled is None:
            return f"{head} · waiting (no step for {fmt_duration(waiting)})"
        left = self.remaining(now)
        if left is not None:
            return f"{head} · {fmt_duration(left)} left"
        why = "" if stalled is None else f" (no step for {fmt_duration(stalled)})"
        return f"{head} · ETA unknown{why}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "percent": self.percent}

    @classmethod
    def from_dict(cls, raw: Any) -> Progress | None:
        """Inverse of :meth:`to_dict`; None for anything that is not one."""
        if not isinstance(raw, dict):
            return None
        try:
            total = raw.get("total")
            eta, step_s = raw.get("eta_s"), raw.get("step_s")
            return cls(
                step=int(raw["step"]),
                total=None if total is None else int(total),
                t=float(raw["t"]),
                eta_s=None if eta is None else float(eta),
                step_s=None if step_s is None else float(step_s),
                anew=bool(raw.get("anew", False)),
            )
        except (KeyError, TypeError, ValueError):
            return None


def progress_text(
    progress: Progress, now: float, finished: bool = False, restarting: bool = False
) -> str:
    """``42% (420/1000) · 1m 30s left``; a finished job shows where it stopped, no ETA; a
    restarting one says ``restarting`` (see :meth:`Progress.describe`)."""
    if finished:
        return progress.head()
    return progress.describe(now, restarting)


def progress_short(
    progress: Progress, now: float, finished: bool = False, restarting: bool = False
) -> str:
    """The job list's cell (narrow): ``42% · 2m``, ``42% · restarting``, ``42% · waiting``,
    ``42% · ETA unknown``, ``step 12``, ``100%``."""
    pct = progress.percent
    if pct is None:
        return f"step {progress.step}"
    if finished or progress.done:
        return f"{pct:g}%"
    if restarting or progress.restarting:
        return f"{pct:g}% · restarting"
    if progress.waiting_for(now) is not None and progress.stalled_for(now) is None:
        return f"{pct:g}% · waiting"
    left = progress.remaining(now)
    return f"{pct:g}% · " + ("ETA unknown" if left is None else fmt_duration(left, units=1))


class ProgressTracker:
    """Feed ``update(step, total, t)`` (and ``resumed(step, t)``); read :attr:`progress`. Not
    thread-safe."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self._step_s: float | None = None
        self._intervals = 0
        self._total: int | None = None
        self._anchor: tuple[int, float] | None = None  # the step the next interval starts at
        self._anew = False  # the rate is measured anew (Progress.anew)

    def update(self, step: int, total: int | None, t: float) -> Progress:
        """One observation: the job is at ``step`` (of ``total``, when given) at time ``t``."""
        if total is not None and total > 0:
            self._total = int(total)
        last = self._anchor
        if last is not None and step < last[0]:  # restarted from a checkpoint: measure anew
            self._step_s, self._intervals, self._anew = None, 0, self.progress is not None
        elif last is not None and step > last[0] and t > last[1]:
            per_step = (t - last[1]) / (step - last[0])
            old = self._step_s
            self._step_s = per_step if old is None else old + ALPHA * (per_step - old)
            self._intervals += 1
        elif last is not None and step == last[0]:
            t = last[1]  # nothing moved: the ETA keeps counting down from the last real step
        self._anchor = (step, t)
        eta = self._eta(step)
        self._anew = self._anew and eta is None
        self.progress = Progress(step, self._total, t, eta, self._step_s, self._anew)
        return self.progress

    def resumed(self, step: int, t: float) -> Progress | None:
        """The job resumed from its checkpoint of ``step`` at ``t``: it stands at that step
        again, and its rate is measured anew from the next step on (the restart took no step
        time); the time left is unknown until that rate is known. None before any progress."""
        self._step_s, self._intervals, self._anchor = None, 0, None
        if self.progress is None:
            return None
        self._anew = True
        self.progress = Progress(step, self._total, t, None, None, True)
        return self.progress

    def restarted(self, t: float) -> Progress | None:
        """The job's nodes start again after a fault at ``t``: it stands where it was, and is
        restarting until the new attempt's rate is known (whether it resumes from a checkpoint
        or starts over). None before any progress."""
        if self.progress is None:
            return None
        return self.resumed(self.progress.step, t)

    def _eta(self, step: int) -> float | None:
        known, step_s = self._total, self._step_s
        if known is None or step_s is None or self._intervals < MIN_INTERVALS:
            return None
        return max(0, known - step - 1) * step_s


class JobProgress:
    """The progress of a job from its ranks' records, the one rule every reader keeps: the
    lowest rank that reports a ``total`` is the job's (rank 0 as a rule; a higher rank's
    progress until rank 0's first record comes, then rank 0's, measured anew); a ``resume``
    record (rank 0's, for the whole job) starts the rate anew. Not thread-safe."""

    def __init__(self) -> None:
        self.tracker = ProgressTracker()
        self.rank: int | None = None

    @property
    def progress(self) -> Progress | None:
        return self.tracker.progress

    def restarted(self, t: float) -> Progress | None:
        """The job's nodes start again after a fault (:meth:`ProgressTracker.restarted`)."""
        return self.tracker.restarted(t)

    def feed(self, rank: int, record: Metric | Resume, now: float) -> Progress | None:
        """Take ``rank``'s record (at ``record.t``, else ``now``): the job's new progress when
        the record carries a step and a total and ``rank`` is the job's, or is a resume of a
        job with progress; else None."""
        t = now if record.t is None else record.t
        if isinstance(record, Resume):
            return None if self.rank is None else self.tracker.resumed(record.step, t)
        if record.step is None or record.total is None:
            return None
        if self.rank is None or rank < self.rank:
            self.tracker, self.rank = ProgressTracker(), rank
        if rank != self.rank:
            return None
        return self.tracker.update(record.step, record.total, t)
