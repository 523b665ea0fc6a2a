"""The job vocabulary every layer speaks, at the bottom: it imports nothing of the package, and
backends, the monitor, the server and the front ends build on it.

- :class:`JobState`: a job's state, a ``str`` enum (a state read from a file or an API compares
  equal to its member), with :attr:`JobState.is_terminal`; the member names as constants
  (:data:`RUNNING` ...), :data:`JOB_STATES` in their order, :data:`TERMINAL_STATES`, and
  :data:`BACKEND_ENDS` (the ends a backend writes: ``Deleted`` is the monitor's own);
- :data:`CANCELLED_BY_USER`: the words for a job or run stopped on the user's request, the same
  in a log line, a run's end and a cell's error.

The TypeScript payloads take the states from here (``scripts/gen_ts.py`` through
:mod:`jupyter_ktrain.server.payloads`).
"""

from __future__ import annotations

import enum

__all__ = [
    "BACKEND_ENDS",
    "CANCELLED",
    "CANCELLED_BY_USER",
    "DELETED",
    "FAILED",
    "JOB_STATES",
    "PENDING",
    "QUEUED",
    "RUNNING",
    "SUCCEEDED",
    "TERMINAL_STATES",
    "JobState",
    "is_terminal",
]


class JobState(str, enum.Enum):
    """A job's state. A member is its word (``str(RUNNING) == "Running"``, equal and hashed
    alike), so a state read as a string from ``state.json`` or an API matches it."""

    __str__ = str.__str__
    __hash__ = str.__hash__

    def __format__(self, spec: str) -> str:
        return str.__format__(str(self), spec)

    PENDING = "Pending"
    QUEUED = "Queued"  # waiting in a queue (Kueue) for quota: created, not yet admitted
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"  # stopped on a user's request: its own end, not a failure
    DELETED = "Deleted"  # gone from the cluster while followed

    @property
    def is_terminal(self) -> bool:
        """The job ended: nothing it does changes any more."""
        return self in TERMINAL_STATES


PENDING = JobState.PENDING
QUEUED = JobState.QUEUED
RUNNING = JobState.RUNNING
SUCCEEDED = JobState.SUCCEEDED
FAILED = JobState.FAILED
CANCELLED = JobState.CANCELLED
DELETED = JobState.DELETED
JOB_STATES: tuple[JobState, ...] = tuple(JobState)
TERMINAL_STATES: frozenset[str] = frozenset({SUCCEEDED, FAILED, CANCELLED, DELETED})
BACKEND_ENDS: frozenset[str] = frozenset({SUCCEEDED, FAILED, CANCELLED})

CANCELLED_BY_USER = "cancelled by the user"


def is_terminal(state: str | None) -> bool:
    """``state`` (a word as read from a file or an API, or None) is an end."""
    return state in TERMINAL_STATES
