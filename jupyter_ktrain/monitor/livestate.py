"""One live truth of a job, worded once for every view: the cell's text, the widget, the panel.

The truth is the backend's :class:`~jupyter_ktrain.backends.base.JobStatus` (state, why,
progress, restarts, a warm job's runs, replica rows): the kernel's follow loop gets it a few
times a second and the side panel's server at each poll, from the same store (a local job's
``state.json``, which its supervisor writes as records arrive; a cluster job's objects). What
the views say of it is decided here, so no view words a state, a restart or a warm job its
own way:

- :func:`restarting`: the job is starting its nodes again (its progress says "restarting",
  not a time left counting down);
- :func:`progress_words`: ``42% (25/60) · 12s left`` and the list's short ``42% · 12s``;
- :func:`replica_rows`: the replica table; a warm job's run shows its nodes as staying up
  ("warm"), not as "Succeeded / exited with code 0";
- :func:`warm_words`: a warm job's runs, visible ("run 3 of a live job", "2 runs · idle 1m",
  "ended after 2 runs"), never an idle clock counting on a job that ended;
- :func:`ended_by_user`: a warm job its user ended after its runs: its own end, no failure.

Pure: no I/O, no widget imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..pod.progress import fmt_duration, progress_short, progress_text
from .model import ReplicaRow
from .viewmodel import CANCELLED, RUNNING, TERMINAL_STATES

if TYPE_CHECKING:
    from ..jobs import JobStatus, ReplicaStatus

__all__ = [
    "ended_by_user",
    "progress_words",
    "replica_rows",
    "restarting",
    "run_words",
    "warm_words",
]

RESTARTING = "Restarting"
_DOWN = frozenset({RESTARTING, "Failed"})  # a replica between a fault and its restart


def restarting(status: JobStatus) -> bool:
    """Whether the running job is starting its nodes again after a fault: its reason says so,
    or a replica is down (failed, or restarting) while the job still runs."""
    if status.state != RUNNING:
        return False
    return status.reason == RESTARTING or any(r.phase in _DOWN for r in status.replicas)


def progress_words(status: JobStatus, now: float) -> tuple[str, str] | None:
    """(``text``, ``short``) of the job's progress, or None before any: ``42% (25/60) · 12s
    left`` and ``42% · 12s``; ``… · restarting`` during a restart, ``… · waiting`` when no
    step came for several step times, where it stopped once the job ended."""
    p = status.progress
    if p is None:
        return None
    ended, again = status.state in TERMINAL_STATES, restarting(status)
    return progress_text(p, now, ended, again), progress_short(p, now, ended, again)


def replica_row(r: ReplicaStatus, run: int | None = None) -> ReplicaRow:
    """One row of the replica table. In a warm job's run (``run``), a node whose part of the
    run ended well stays up for the next run: it reads ``warm``, not ``Succeeded``."""
    event = r.last_event
    if not event and r.exit_code is not None:
        event = f"exited with code {r.exit_code}"
    phase = r.phase
    if run is not None and r.phase == "Succeeded" and r.exit_code in (0, None):
        phase, event = "warm", f"run {run} done; the node stays up for the next run"
    return ReplicaRow(r.name, phase, r.restarts, r.node, event, r.restart_cause)


def replica_rows(status: JobStatus, run: int | None = None) -> list[ReplicaRow]:
    """The replica table of ``status`` (of warm run ``run`` when given)."""
    return [replica_row(r, run) for r in status.replicas]


def run_words(run: int | None) -> str:
    """``run 3 of a live job`` for a warm job's run; ``""`` for any other job."""
    return "" if run is None else f"run {run} of a live job"


def warm_words(status: JobStatus, now: float) -> str:
    """A warm job in a few words, its runs always said: ``run 3 of a live job`` while a run
    goes, ``warm · 2 runs · idle 1m`` between runs, ``ended after 2 runs`` once it ended
    (no idle clock on a job that is over); ``""`` for any other job."""
    w = status.warm
    if w is None:
        return ""
    runs = f"{w.runs} run{'' if w.runs == 1 else 's'}"
    if status.state in TERMINAL_STATES:
        return f"ended after {runs}"
    if w.active is not None:
        return run_words(w.active)
    gpus = f" · {w.gpus} GPU · {w.idle_gpu_hours(now):.2f} GPU-h idle" if w.gpus else ""
    return f"warm · {runs} · idle {fmt_duration(w.idle_s(now), 1)}{gpus}"


def ended_by_user(status: JobStatus) -> bool:
    """A warm job its user ended (``%ktrain warm NAME --idle 0``, cancel): the end it was
    asked for, not a failure, whatever its runs did."""
    return status.warm is not None and status.state == CANCELLED
