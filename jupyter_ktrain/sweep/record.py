"""A sweep as it stands, as one record: what the process running it writes to the job store
(:class:`~jupyter_ktrain.store.sweeps.SweepRecord`, the file's JSON there) and every view reads
(the cell's sweep view, the side panel, ``%ktrain attach SWEEP``, ``%ktrain compare SWEEP``).
Pure. The record's types are the job store's, named here for the layers above.

A record that says Running while the process that writes it is gone (a kernel restarted
mid-sweep) reads as Interrupted (:func:`seen_state`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ..jobs import TrialState
from ..store.sweeps import SweepRecord, SweepState, TrialRow
from ..sweep_spec.objective import parse_objective
from ..sweep_spec.sweep_options import SweepOptions
from .trials import Sweep, Trial, best_of

__all__ = [
    "DONE",
    "INTERRUPTED",
    "RUNNING",
    "STOPPED",
    "SweepRecord",
    "SweepState",
    "TrialRow",
    "make_record",
    "row_of",
    "running_row",
    "seen_state",
    "sweep_of",
]

RUNNING, DONE, STOPPED, INTERRUPTED = (
    SweepState.RUNNING,
    SweepState.DONE,
    SweepState.STOPPED,
    SweepState.INTERRUPTED,
)


def row_of(trial: Trial, started: float | None, ended: float | None) -> TrialRow:
    """An ended trial's row."""
    return TrialRow(
        trial.number, dict(trial.params), trial.state, trial.objective, trial.job, trial.run,
        trial.error, started, ended,
    )  # fmt: skip


def running_row(
    number: int,
    params: Mapping[str, Any],
    job: str,
    run: int | None,
    started: float,
    objective: float | None,
) -> TrialRow:
    """A running trial's row: its objective so far."""
    return TrialRow(number, dict(params), TrialState.RUNNING, objective, job, run, "", started)


def make_record(
    name: str,
    backend: str,
    sweep: SweepOptions,
    warm: bool,
    started: float,
    state: SweepState,
    rows: Sequence[TrialRow],
    curves: Mapping[int, Mapping[int, float]],
    ended: float | None = None,
) -> SweepRecord:
    """The sweep's record now (rows in number order; each curve by step)."""
    ordered = tuple(sorted(rows, key=lambda r: r.number))
    best = best_of([_trial(r) for r in ordered], sweep.objective)
    return SweepRecord(
        name, backend, str(sweep.objective), tuple(str(p) for p in sweep.params), sweep.search,
        sweep.trials, sweep.parallel, warm, sweep.prune_after, started, ended, state,
        socket.gethostname(), os.getpid(), ordered,
        {k: tuple(sorted(c.items())) for k, c in curves.items()},
        best.number if best is not None else None,
    )  # fmt: skip


def seen_state(record: SweepRecord) -> SweepState:
    """The record's state as a reader sees it: Running only while its writer lives (a process
    of this host; another host's record is taken as it says)."""
    state = record.state
    if state != RUNNING or record.host != socket.gethostname():
        return state
    try:
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return INTERRUPTED
    except (PermissionError, ValueError, OverflowError):
        pass
    return state


def _trial(row: TrialRow) -> Trial:
    return Trial(row.number, dict(row.params), row.state, row.objective, row.job, row.run,
                 row.error)  # fmt: skip


def sweep_of(record: SweepRecord) -> Sweep:
    """The :class:`Sweep` a record holds (its trials without job handles; running trials
    with state Running)."""
    return Sweep(record.name, parse_objective(record.objective), tuple(map(_trial, record.rows)))
