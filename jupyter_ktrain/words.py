"""The words for a job's status, once, for every view: the cell's text, the widget, the panel,
the ``ktrain`` CLI and a job handle's ``repr``; just above the vocabulary (:mod:`.jobs`), below
the backends and every view.

The truth is the backend's :class:`~jupyter_ktrain.jobs.JobStatus` (state, why, progress,
restarts, a warm job's runs, replica rows): the kernel's follow loop gets it a few times a
second and the side panel's server at each poll, from the same store (a local job's
``state.json``, which its supervisor writes as records arrive; a cluster job's objects). What
the views say of it is decided here, so no view words a state, a restart or a warm job its
own way:

- :func:`status_words`: everything the views say of one status, worded at once
  (:class:`StatusWords`): the cell's header and replica table (through the follow loop's
  sink), the panel's payloads, ``%ktrain list`` and the CLI each show the part they have room
  for. The pieces it is made of, each used alone where a view needs only it:
- :func:`describe`: the job in one line (``Running · 42% (420/1000) · 1m 30s left ·
  reason``: ``%ktrain list``, the CLI's and the magic's replies, a job handle's ``repr``);
- :func:`state_message`: what follows the state in the cell's header and text (the reason and
  message, or which rank failed first);
- :func:`status_text`: ``%ktrain status NAME`` (state and why, times, exit codes, replicas);
- :func:`cancelled_text`: what ``%ktrain cancel NAME`` did, as it happened;
- :func:`restarting`: the job is starting its nodes again (its progress says "restarting",
  not a time left counting down);
- :func:`progress_words`: ``42% (25/60) · 12s left`` and the list's short ``42% · 12s``;
- :func:`replica_row`: a replica as the views show it (the same
  :class:`~jupyter_ktrain.jobs.ReplicaStatus`, its phase and event worded): a warm job's run
  shows its nodes as staying up ("warm"), not as "Succeeded / exited with code 0";
- :func:`restart_text`: a replica's restart (the cell, the widget's alert, the panel's line);
- :func:`warm_text` and :func:`warm_words`: a warm job's runs, visible ("run 3 of a live job",
  "2 runs · idle 1m", "ended after 2 runs"), never an idle clock counting on a job that ended;
  while its nodes start, what they do (:func:`warm_starting`: "its nodes import torch, 1 of 2
  ready"), also as the message of a run that waits for them (:func:`run_waiting`);
- :func:`ended_by_user`: a warm job its user ended after its runs: its own end, no failure.

Pure: no I/O, no widget imports.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from .jobs import CANCELLED, FAILED, RUNNING, JobStatus, ReplicaPhase, ReplicaStatus, WarmInfo
from .pod.progress import fmt_duration, progress_short, progress_text

__all__ = [
    "StatusWords",
    "cancelled_text",
    "describe",
    "ended_by_user",
    "progress_words",
    "replica_restart_text",
    "replica_row",
    "replica_rows",
    "restart_text",
    "restarting",
    "run_waiting",
    "run_words",
    "state_message",
    "status_text",
    "status_words",
    "warm_starting",
    "warm_text",
    "warm_words",
]

RESTARTING = "Restarting"
# a replica between a fault and its restart
_DOWN = frozenset({ReplicaPhase.RESTARTING, ReplicaPhase.FAILED})


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
    ended, again = status.terminal, restarting(status)
    return progress_text(p, now, ended, again), progress_short(p, now, ended, again)


@dataclass(frozen=True)
class StatusWords:
    """Everything the views say of one status, worded once (:func:`status_words`)."""

    line: str  # the job in one line (describe)
    message: str  # what follows the state in the cell's header (state_message)
    progress: tuple[str, str] | None  # (text, short) of its progress; None before any
    warm: tuple[str, str] | None  # (text, short) of a warm job's runs; None for another job
    restarting: bool  # it starts its nodes again after a fault: no time left counting down
    replicas: tuple[ReplicaStatus, ...]  # the replica table, each row worded (replica_row)


def status_words(
    status: JobStatus, now: float | None = None, run: int | None = None
) -> StatusWords:
    """What every view says of ``status`` at ``now`` (of warm run ``run`` when given)."""
    now = time.time() if now is None else now
    progress = progress_words(status, now)
    warm = None
    if status.warm is not None:
        warm = (warm_text(status.warm, now, status.terminal), warm_words(status, now))
    parts: list[str] = [status.state]
    parts += [] if progress is None else [progress[0]]
    parts += [] if warm is None else [warm[0]]
    parts += [status.reason] if status.reason else []
    return StatusWords(
        line=" · ".join(parts),
        message=state_message(status),
        progress=progress,
        warm=warm,
        restarting=restarting(status),
        replicas=tuple(replica_rows(status, run)),
    )


def describe(status: JobStatus, now: float | None = None) -> str:
    """``Running · 42% (420/1000) · 1m 30s left · reason`` (one line, for lists)."""
    return status_words(status, now).line


def state_message(status: JobStatus) -> str:
    """What the header says after the state: the backend's reason and message, or for a
    failed job without a message, which rank failed first (not a reason code)."""
    rank, message = status.failed_rank, status.message
    if status.state == FAILED and rank is not None and not message:
        code = status.exit_codes.get(rank)
        return f"rank {rank} failed first" + (f" (exit code {code})" if code is not None else "")
    reason = "" if status.reason == status.state else status.reason  # not "Queued (Queued: ...)"
    return (reason if not message else f"{reason}: {message}").strip(": ")


def restart_text(replica: str, restarts: int, why: str, limit: int | None) -> str:
    """``job-node-1 restarted after exit 137 (SIGKILL) (restart 1 of at most 3)``: a replica's
    restart as every view says it (the cell, the widget's alert, the panel's replica line);
    ``why`` is its restart cause or last event (a leading "restarted" is dropped)."""
    of = f" of at most {limit}" if limit is not None else ""
    cause = why.removeprefix("restarted").strip()
    return f"{replica} restarted {cause} (restart {restarts}{of})".replace("  ", " ")


def replica_restart_text(r: ReplicaStatus, limit: int | None) -> str:
    """:func:`restart_text` of replica ``r`` (``""`` when it never restarted)."""
    if not r.restarts:
        return ""
    return restart_text(r.name, r.restarts, r.restart_cause or r.last_event, limit)


def replica_row(r: ReplicaStatus, run: int | None = None) -> ReplicaStatus:
    """Replica ``r`` as the replica table shows it: its last event says how it exited when
    nothing else did. In a warm job's run (``run``), a node whose part of the run ended well
    stays up for the next run: it reads ``warm``, not ``Succeeded``."""
    event = r.last_event
    if not event and r.exit_code is not None:
        event = f"exited with code {r.exit_code}"
    phase = r.phase
    if run is not None and r.phase == ReplicaPhase.SUCCEEDED and r.exit_code in (0, None):
        phase, event = ReplicaPhase.WARM, f"run {run} done; the node stays up for the next run"
    return replace(r, phase=phase, last_event=event)


def replica_rows(status: JobStatus, run: int | None = None) -> list[ReplicaStatus]:
    """The replica table of ``status`` (of warm run ``run`` when given)."""
    return [replica_row(r, run) for r in status.replicas]


def run_words(run: int | None) -> str:
    """``run 3 of a live job`` for a warm job's run; ``""`` for any other job."""
    return "" if run is None else f"run {run} of a live job"


def warm_starting(w: WarmInfo) -> str:
    """``its nodes import torch (1 of 2 ready)`` while a warm job's nodes start (seconds:
    no run can go before), ``""`` once they are ready."""
    if not w.starting:
        return ""
    return f"its nodes import torch ({w.ready} of {w.nodes} ready)"


def run_waiting(w: WarmInfo | None) -> str:
    """The message of a warm job's run that waits for its nodes to start: ``waiting for the
    warm job's nodes: its nodes import torch (0 of 2 ready)``; ``""`` when it waits for none."""
    starting = "" if w is None else warm_starting(w)
    return f"waiting for the warm job's nodes: {starting}" if starting else ""


def warm_text(w: WarmInfo, now: float, ended: bool = False) -> str:
    """``warm, 3 run(s), idle 2m of 15m, 8 GPU(s), 0.27 idle GPU-h`` (``%ktrain list``, the
    panel's tooltip); ``warm, 3 run(s), run 3 running`` during a run; ``warm, starting: its
    nodes import torch (1 of 2 ready)`` while its nodes start; the runs only once ``ended``."""
    runs = f"warm, {w.runs} run(s)"
    if ended:
        return runs
    if w.active is not None:
        return f"{runs}, run {w.active} running"
    if w.starting:
        return f"warm, starting: {warm_starting(w)}"
    idle, limit = fmt_duration(w.idle_s(now), 1), fmt_duration(w.idle_limit_s, 1)
    idle = f"{runs}, idle {idle} of {limit}"
    if w.gpus:
        idle += f", {w.gpus} GPU(s), {w.idle_gpu_hours(now):.2f} idle GPU-h"
    return idle


def warm_words(status: JobStatus, now: float) -> str:
    """A warm job in a few words, its runs always said: ``run 3 of a live job`` while a run
    goes, ``warm · 2 runs · idle 1m`` between runs, ``warm · starting: its nodes import torch
    (1 of 2 ready)`` while its nodes start, ``ended after 2 runs`` once it ended (no idle clock
    on a job that is over); ``""`` for any other job."""
    w = status.warm
    if w is None:
        return ""
    runs = f"{w.runs} run{'' if w.runs == 1 else 's'}"
    if status.terminal:
        return f"ended after {runs}"
    if w.active is not None:
        return run_words(w.active)
    if w.starting:
        return f"warm · starting: {warm_starting(w)}"
    gpus = f" · {w.gpus} GPU · {w.idle_gpu_hours(now):.2f} GPU-h idle" if w.gpus else ""
    return f"warm · {runs} · idle {fmt_duration(w.idle_s(now), 1)}{gpus}"


def ended_by_user(status: JobStatus) -> bool:
    """A warm job its user ended (``%ktrain warm NAME --idle 0``, cancel): the end it was
    asked for, not a failure, whatever its runs did."""
    return status.warm is not None and status.state == CANCELLED


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _codes(codes: dict[int, int]) -> str:
    """``0-2: 0, 3: 1``: consecutive ranks with one code share a range."""
    out: list[str] = []
    ranks = sorted(codes)
    i = 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            if codes[ranks[j + 1]] != codes[ranks[i]]:
                break
            j += 1
        span = str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}"
        out.append(f"{span}: {codes[ranks[i]]}")
        i = j + 1
    return ", ".join(out)


def status_text(status: JobStatus, backend: str, now: float | None = None) -> str:
    """``%ktrain status NAME`` for a human: state and why, times, exit codes, replicas."""
    now = time.time() if now is None else now
    why = f" ({status.reason}{': ' + status.message if status.message else ''})"
    lines = [f"{status.name} on {backend}: {status.state}{why if status.reason else ''}"]
    if status.from_history:
        lines.append("  deleted   its objects are gone: this is its history (the job store)")
    if status.started is not None:
        end = status.finished if status.finished is not None else now
        ran = fmt_duration(int(max(0.0, end - status.started)))
        verb = "ran" if status.finished is not None else "running for"
        lines.append(f"  started   {_when(status.started)} ({verb} {ran})")
    if status.finished is not None:
        lines.append(f"  finished  {_when(status.finished)}")
    if status.exit_codes:
        lines.append(f"  exit codes by rank  {_codes(dict(status.exit_codes))}")
    if status.failed_rank is not None:
        lines.append(f"  first failing rank  {status.failed_rank}")
    for r in status.replicas:
        code = "" if r.exit_code is None else f" exit {r.exit_code}"
        extra = f" restarts {r.restarts}" if r.restarts else ""
        event = f" · {r.last_event}" if r.last_event else ""
        lines.append(f"  {r.name}: {r.phase}{code}{extra} on {r.node or '-'}{event}")
    return "\n".join(lines)


def cancelled_text(name: str, status: JobStatus | None) -> str:
    """What ``%ktrain cancel`` did, as it happened: ``Cancelled 'x'.``, with what the backend
    found (``its supervisor was gone; the cancel stopped ...``), or how the job ended meanwhile.
    ``status`` is None when the cancel removed the job (Kubernetes deletes it)."""
    if status is None or not status.terminal:
        return f"Cancelled {name!r}."
    if status.state == CANCELLED:
        return (
            f"Cancelled {name!r}: {status.message}." if status.message else f"Cancelled {name!r}."
        )
    why = f"{status.reason}: {status.message}" if status.message else status.reason
    return (
        f"{name!r} ended {status.state} ({why}) before the cancel took effect; nothing of it runs."
    )
