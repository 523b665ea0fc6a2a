"""The job vocabulary every layer speaks, at the bottom: it imports nothing of the package, and
backends, the monitor, the server and the front ends build on it.

- :class:`JobState`: a job's state, a ``str`` enum (a state read from a file or an API compares
  equal to its member); the member names as constants (:data:`RUNNING` ...), :data:`JOB_STATES`
  in their order, and the one terminal rule: :data:`TERMINAL_STATES` and :func:`is_terminal`
  (which :attr:`JobStatus.terminal` asks);
- :class:`ReplicaPhase`: a replica's phase, a ``str`` enum the same way (a pod's phase as the
  API says it, a local node's as ``state.json`` says it);
- :class:`TrialState`: a sweep trial's state, a ``str`` enum the same way: running, one of the
  ends of its job or ``Pruned``;
- :data:`CANCELLED_BY_USER`: the words for a job or run stopped on the user's request, the same
  in a log line, a run's end and a cell's error, and :data:`CANCELLED_REASON`, its reason code
  (``Cancelled (CancelledByUser)``);
- what a backend says of a job and every view reads: :class:`JobStatus` (with its
  :class:`ReplicaStatus` rows, queue :class:`Eviction` counts and :class:`WarmInfo`),
  :class:`JobShape` (how it was started) and :func:`complete_exit_codes`. Every layer uses
  these types themselves (the monitor's model, the widget, the panel's payloads): what a view
  words of them is :mod:`jupyter_ktrain.words`';
- :class:`View`: the monitor's port, what a view of a running job offers (the widget, the text).

Below it only :mod:`jupyter_ktrain.pod` (standard library only) and :mod:`jupyter_ktrain.kinds`
(the kind table, standard library only); ``tests/unit/test_import_cycles.py`` holds it there.

The TypeScript payloads take the states from here (``scripts/gen_ts.py`` through
:mod:`jupyter_ktrain.server.payloads`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from .kinds import DEFAULT_KIND
from .pod.progress import Progress

__all__ = [
    "CANCELLED",
    "CANCELLED_BY_USER",
    "CANCELLED_REASON",
    "DELETED",
    "DELETED_AFTER_END",
    "DELETED_REASON",
    "DELETED_WHILE_RUNNING",
    "FAILED",
    "JOB_STATES",
    "PENDING",
    "QUEUED",
    "RUNNING",
    "SUCCEEDED",
    "TERMINAL_STATES",
    "Eviction",
    "JobShape",
    "JobState",
    "JobStatus",
    "ReplicaPhase",
    "ReplicaStatus",
    "TrialState",
    "View",
    "WarmInfo",
    "Word",
    "complete_exit_codes",
    "is_terminal",
]


class Word(str, enum.Enum):
    """The base of every enum whose member is its word: ``str(m)``, ``f"{m}"``, equality and
    hash are the word's, so a word read as a string (a JSON file, an API) matches it."""

    __str__ = str.__str__
    __hash__ = str.__hash__

    def __format__(self, spec: str) -> str:
        return str.__format__(str(self), spec)


class JobState(Word):
    """A job's state. A member is its word (``str(RUNNING) == "Running"``, equal and hashed
    alike), so a state read as a string from ``state.json`` or an API matches it. Whether a
    state is an end: :func:`is_terminal`."""

    PENDING = "Pending"
    QUEUED = "Queued"  # waiting in a queue (Kueue) for quota: created, not yet admitted
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"  # stopped on a user's request: its own end, not a failure
    DELETED = "Deleted"  # gone: see is_terminal


PENDING = JobState.PENDING
QUEUED = JobState.QUEUED
RUNNING = JobState.RUNNING
SUCCEEDED = JobState.SUCCEEDED
FAILED = JobState.FAILED
CANCELLED = JobState.CANCELLED
DELETED = JobState.DELETED
JOB_STATES: tuple[JobState, ...] = tuple(JobState)
# a replica whose pod is gone once the job ended (the operator's clean-up, cleanPodPolicy
# Running, deletes the pods still running when a job ends)
DELETED_WHILE_RUNNING = "its pod was deleted while it still ran, as the job ended"
DELETED_AFTER_END = "its pod was deleted as the job ended"
TERMINAL_STATES: frozenset[str] = frozenset({SUCCEEDED, FAILED, CANCELLED, DELETED})

# the reason of a job that is gone while followed or cancelled on a cluster: it reads Cancelled
DELETED_REASON = "Deleted"
CANCELLED_BY_USER = "cancelled by the user"
CANCELLED_REASON = "CancelledByUser"


def is_terminal(state: str | None) -> bool:
    """``state`` (a word as read from a file or an API, or None) is an end: the job's one
    terminal rule, asked by :attr:`JobStatus.terminal`, the follow loop, the job store and every
    view. The ends are ``Succeeded``, ``Failed``, ``Cancelled`` and ``Deleted``.

    ``Deleted`` is a job that is gone: no backend writes it as a job's state (a job deleted
    while followed, or cancelled on a cluster, reads ``Cancelled`` with the reason
    :data:`DELETED_REASON`: :mod:`jupyter_ktrain.monitor.follow_loop`), and a replica whose pod
    was deleted reads it as its phase (:class:`ReplicaPhase`). A job in it is over all the
    same: nothing it does changes any more, so a follow loop that sees it stops."""
    return state in TERMINAL_STATES


class ReplicaPhase(Word):
    """A replica's phase. A member is its word, as :class:`JobState`'s are, so a phase read as a
    string (a pod's ``status.phase``, a history file's) matches it; a word this version does not
    know reads as :attr:`UNKNOWN`. A pod's phases, then the words the backends and views add."""

    PENDING = "Pending"
    QUEUED = "Queued"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"  # a local node stopped with its cancelled job
    UNKNOWN = "Unknown"  # the pod's state could not be obtained (or a word we do not know)
    NOT_CREATED = "NotCreated"  # no pod (not yet, or never seen by this watch)
    DELETED = "Deleted"  # its pod was deleted while it still ran, as the job ended
    RESTARTING = "Restarting"  # a local node its supervisor starts again after a fault
    ENDED = "Ended"  # a warm job's node ended its part of the run
    WARM = "warm"  # a view's word: a warm job's node that stays up for the next run

    @classmethod
    def _missing_(cls, value: object) -> ReplicaPhase:
        return cls.UNKNOWN


class TrialState(Word):
    """A sweep trial's state: its job's (running, or how it ended: the words of
    :class:`JobState`, one word each) or ``Pruned`` (stopped by the sweep's pruning rule). A
    member is its word, as :class:`JobState`'s are."""

    RUNNING = JobState.RUNNING.value
    SUCCEEDED = JobState.SUCCEEDED.value
    FAILED = JobState.FAILED.value
    CANCELLED = JobState.CANCELLED.value
    PRUNED = "Pruned"  # stopped by the sweep (its median rule), not by its job


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica: a pod, or one local node (a torchrun agent)."""

    name: str
    phase: ReplicaPhase
    restarts: int = 0
    node: str = ""
    exit_code: int | None = None
    last_event: str = ""
    # why it last restarted ("restarted after exit 137, ..."), kept apart from ``last_event``,
    # which a newer state (e.g. PodInitializing) may take over
    restart_cause: str = ""
    # its pod was deleted as the job ended (shown as last seen; its ranks' exit records, when
    # they all reported, say how it ended: complete_exit_codes)
    deleted: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.phase, ReplicaPhase):  # a word read from an API or a file
            object.__setattr__(self, "phase", ReplicaPhase(self.phase))


@dataclass(frozen=True)
class Eviction:
    """How often a queue (Kueue) took the job's pods back for one reason: preempted by a
    higher-priority job, pods not ready in time, ... The job was requeued, not failed."""

    reason: str
    text: str  # the reason as a user reads it ("" when the queue gave none we know)
    count: int


@dataclass(frozen=True)
class JobStatus:
    """What a user checks: state (Pending/Running/Succeeded/Failed), why, and per-rank codes.

    ``failed_rank`` is the first rank that failed (by time), when known, so its last lines can
    be shown first. ``max_restarts`` is the job's limit of fault restarts (Kubernetes:
    ``backoffLimit``). ``progress`` is percent done and time left, once the job reports a total
    (``ktrain.report(step=..., total=...)`` or the Transformers Trainer); None before.
    """

    name: str
    state: JobState
    reason: str = ""
    message: str = ""
    exit_codes: Mapping[int, int] = field(default_factory=dict)
    replicas: tuple[ReplicaStatus, ...] = ()
    started: float | None = None
    finished: float | None = None
    failed_rank: int | None = None
    progress: Progress | None = None
    max_restarts: int | None = None  # how many fault restarts the job allows, when known
    # a warm job (``--warm``): its runs so far, the run in progress, since when it is idle, its
    # idle limit in seconds and its GPUs; None for any other job
    warm: WarmInfo | None = None
    # a queued job (Kueue): each reason it was evicted and requeued for, with its count, and
    # the queue that admitted it ("ClusterQueue 'x'"; "" while it waits or went through none)
    evictions: tuple[Eviction, ...] = ()
    admitted_by: str = ""
    # where to watch the job in its framework's own UI ("Ray dashboard: http://..."), once known
    dashboard: str = ""
    # read from the job store (a backend's history): the job's objects are gone (deleted)
    from_history: bool = False

    @property
    def restarts(self) -> int:
        """Restarts of every replica so far (a fault restarted: killed, deleted, preempted)."""
        return sum(r.restarts for r in self.replicas)

    @property
    def terminal(self) -> bool:
        """The job ended (:func:`is_terminal`)."""
        return is_terminal(self.state)


@dataclass(frozen=True)
class WarmInfo:
    """A warm job between and during runs (what ``%ktrain list`` and the side panel show)."""

    runs: int = 0
    active: int | None = None
    idle_since: float | None = None
    idle_limit_s: float = 900.0
    gpus: int = 0
    # while it starts: its nodes, and how many are ready (imported torch); None: not known
    nodes: int = 0
    ready: int | None = None

    @property
    def starting(self) -> bool:
        """Its nodes are still starting (importing torch): no run can go yet."""
        return self.ready is not None and self.ready < self.nodes

    def idle_s(self, now: float) -> float:
        return 0.0 if self.idle_since is None else max(0.0, now - self.idle_since)

    def idle_gpu_hours(self, now: float) -> float:
        """GPU-hours held idle since the last run ended (the current idle stretch)."""
        return self.gpus * self.idle_s(now) / 3600.0


def complete_exit_codes(status: JobStatus, procs_per_node: int) -> JobStatus:
    """``status`` with one exit code per rank once it ended: a rank that never reported its
    own (stopped with its replica, or never started) gets its replica's code (1 if unknown).
    Replicas are in node-rank order; rank r runs on replica r // procs_per_node."""
    if not status.terminal or not status.replicas or procs_per_node < 1:
        return status
    codes = dict(status.exit_codes)
    replicas = list(status.replicas)
    for node, replica in enumerate(replicas):
        ranks = range(node * procs_per_node, (node + 1) * procs_per_node)
        if replica.deleted and all(r in codes for r in ranks):
            # its pod was deleted while it ran, but its ranks said how they ended first
            worst = next((codes[r] for r in ranks if codes[r] != 0), 0)
            replicas[node] = replica = replace(
                replica,
                phase=ReplicaPhase.SUCCEEDED if worst == 0 else ReplicaPhase.FAILED,
                exit_code=worst,
                last_event=f"its ranks ended (exit {worst}), then {DELETED_AFTER_END}",
            )
        for rank in ranks:
            code = replica.exit_code
            codes.setdefault(rank, code if code is not None else 1)
    return replace(status, exit_codes=codes, replicas=tuple(replicas))


@dataclass(frozen=True)
class JobShape:
    """How a job was started: what its monitor's header shows, also after ``attach``."""

    kind: str = DEFAULT_KIND
    nodes: int = 1
    procs_per_node: int = 1
    gpus_per_node: int = 0


class View(Protocol):
    """A view of a running job (the notebook widget, the text in a terminal or nbclient):
    ``show()`` once, ``update(now)`` on a timer (each view throttles itself), ``close(now)`` when
    the job is over or the user detaches. The monitor's follow loop drives it."""

    def show(self) -> None: ...
    def update(self, now: float | None = None) -> None: ...
    def close(self, now: float | None = None) -> None: ...
