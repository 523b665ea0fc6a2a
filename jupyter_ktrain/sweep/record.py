"""A sweep as it stands, as one JSON-able record: what the process running it writes to the
job store (:mod:`jupyter_ktrain.store.sweeps`) and every view reads (the cell's sweep view,
the side panel, ``%ktrain attach SWEEP``, ``%ktrain compare SWEEP``). Pure::

    {"name", "backend", "objective": "loss:min", "space": ["lr=loguniform(1e-05, 0.001)"],
     "search", "trials": asked, "parallel", "warm", "prune_after", "started", "ended",
     "state": Running | Done | Stopped | Interrupted, "host", "pid",
     "rows": [{"number", "params", "state", "objective", "job", "run", "error",
               "started", "ended"}],          # Running rows too, in number order
     "curves": {"3": [[step, value], ...]},   # each trial's objective as it reported it
     "best": number | None}

A record that says Running while the process that writes it is gone (a kernel restarted
mid-sweep) reads as Interrupted (:func:`seen_state`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from ..sweep_spec.objective import parse_objective
from ..sweep_spec.options import SweepOptions
from .trials import Sweep, Trial, best_of

__all__ = [
    "DONE",
    "INTERRUPTED",
    "RUNNING",
    "STOPPED",
    "make_record",
    "row_of",
    "running_row",
    "seen_state",
    "sweep_of",
]

RUNNING, DONE, STOPPED, INTERRUPTED = "Running", "Done", "Stopped", "Interrupted"


def row_of(trial: Trial, started: float | None, ended: float | None) -> dict[str, Any]:
    """An ended trial's row."""
    return {
        "number": trial.number, "params": dict(trial.params), "state": trial.state,
        "objective": trial.objective, "job": trial.job, "run": trial.run,
        "error": trial.error, "started": started, "ended": ended,
    }  # fmt: skip


def running_row(
    number: int,
    params: Mapping[str, Any],
    job: str,
    run: int | None,
    started: float,
    objective: float | None,
) -> dict[str, Any]:
    """A running trial's row: its objective so far."""
    return {
        "number": number, "params": dict(params), "state": RUNNING, "objective": objective,
        "job": job, "run": run, "error": "", "started": started, "ended": None,
    }  # fmt: skip


def make_record(
    name: str,
    backend: str,
    sweep: SweepOptions,
    warm: bool,
    started: float,
    state: str,
    rows: Sequence[Mapping[str, Any]],
    curves: Mapping[int, Mapping[int, float]],
    ended: float | None = None,
) -> dict[str, Any]:
    """The sweep's record now (rows in number order; each curve by step)."""
    ordered = sorted(rows, key=lambda r: r["number"])
    best = best_of([_trial(r) for r in ordered], sweep.objective)
    return {
        "name": name, "backend": backend, "objective": str(sweep.objective),
        "space": [str(p) for p in sweep.params], "search": sweep.search,
        "trials": sweep.trials, "parallel": sweep.parallel, "warm": warm,
        "prune_after": sweep.prune_after, "started": started, "ended": ended,
        "state": state, "host": socket.gethostname(), "pid": os.getpid(),
        "rows": [dict(r) for r in ordered],
        "curves": {str(k): [[s, v] for s, v in sorted(c.items())] for k, c in curves.items()},
        "best": best.number if best is not None else None,
    }  # fmt: skip


def seen_state(record: Mapping[str, Any]) -> str:
    """The record's state as a reader sees it: Running only while its writer lives (a process
    of this host; another host's record is taken as it says)."""
    state = str(record.get("state") or RUNNING)
    if state != RUNNING or record.get("host") != socket.gethostname():
        return state
    try:
        os.kill(int(record.get("pid") or 0), 0)
    except ProcessLookupError:
        return INTERRUPTED
    except (PermissionError, ValueError, OverflowError):
        pass
    return state


def _trial(row: Mapping[str, Any]) -> Trial:
    objective = row.get("objective")
    return Trial(
        int(row["number"]), dict(row.get("params") or {}), str(row.get("state") or ""),
        float(objective) if isinstance(objective, (int, float)) else None,
        str(row.get("job") or ""), row.get("run"), str(row.get("error") or ""),
    )  # fmt: skip


def sweep_of(record: Mapping[str, Any]) -> Sweep:
    """The :class:`Sweep` a record holds (its trials without job handles; running trials
    with state Running)."""
    rows = record.get("rows") or []
    objective = parse_objective(str(record.get("objective") or "loss:min"))
    return Sweep(str(record["name"]), objective, tuple(_trial(r) for r in rows))
