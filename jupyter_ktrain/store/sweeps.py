"""A sweep's record in the job store: ``$KTRAIN_HOME/sweeps/NAME.json`` (private, replaced
atomically), written by the process that runs the sweep each time a trial starts or ends and
at most once a second while trials report. What the cell's sweep view, the side panel,
``%ktrain attach SWEEP`` and ``%ktrain compare SWEEP`` read, so they cannot disagree. It is
made by :mod:`jupyter_ktrain.sweep.record`; ``%ktrain delete SWEEP`` removes it.

Typed: a :class:`SweepRecord` (its state a :class:`SweepState`) with a :class:`TrialRow` per
trial (its state a :class:`~jupyter_ktrain.jobs.TrialState`), converted from and to the file's
JSON here only::

    {"version": 1, "name", "backend", "objective": "loss:min",
     "space": ["lr=loguniform(1e-05, 0.001)"], "search", "trials": asked, "parallel", "warm",
     "prune_after", "started", "ended", "state": Running | Done | Stopped | Interrupted,
     "host", "pid",
     "rows": [{"number", "params", "state", "objective", "job", "run", "error",
               "started", "ended"}],          # Running rows too, in number order
     "curves": {"3": [[step, value], ...]},   # each trial's objective as it reported it
     "best": number | None}

An entry a file lacks takes its default; one this version does not know is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..jobs import TrialState, Word
from .files import make_private_dirs, replace_private, store_error
from .home import ktrain_home
from .versions import versioned

__all__ = [
    "SWEEP_VERSION",
    "SweepRecord",
    "SweepState",
    "TrialRow",
    "keep_sweep",
    "list_sweeps",
    "read_sweep",
    "remove_sweep",
    "sweep_file",
]

SWEEP_VERSION = 1


class SweepState(Word):
    """A sweep's state: Running while its process runs it, then Done, Stopped (at a failed
    trial, ``--stop-on-failure``) or Interrupted. A member is its word (as
    :class:`~jupyter_ktrain.jobs.JobState`'s); a word this version does not know reads as
    Interrupted."""

    RUNNING = "Running"
    DONE = "Done"
    STOPPED = "Stopped"
    INTERRUPTED = "Interrupted"

    @classmethod
    def _missing_(cls, value: object) -> SweepState:
        return cls.INTERRUPTED


def _float(raw: object) -> float | None:
    return float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None


def _int(raw: object) -> int | None:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) else None


def _trial_state(raw: object) -> TrialState:
    try:
        return TrialState(str(raw or TrialState.RUNNING))
    except ValueError:  # a word of a newer version: no end this version knows
        return TrialState.FAILED


@dataclass(frozen=True)
class TrialRow:
    """One trial of a sweep's record: its ``number``, swept ``params``, ``state``, its
    ``objective`` (a running trial's: so far), the ``job`` it ran as (``run``: its run of a
    warm job), ``error`` (why it failed or was pruned, one line) and its times."""

    number: int
    params: Mapping[str, Any] = field(default_factory=dict)
    state: TrialState = TrialState.RUNNING
    objective: float | None = None
    job: str = ""
    run: int | None = None
    error: str = ""
    started: float | None = None
    ended: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, TrialState):  # a word: the edge converts it
            object.__setattr__(self, "state", _trial_state(self.state))

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TrialRow:
        params = raw.get("params")
        return cls(
            number=int(raw["number"]),
            params=dict(params) if isinstance(params, Mapping) else {},
            state=_trial_state(raw.get("state")),
            objective=_float(raw.get("objective")),
            job=str(raw.get("job") or ""),
            run=_int(raw.get("run")),
            error=str(raw.get("error") or ""),
            started=_float(raw.get("started")),
            ended=_float(raw.get("ended")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number, "params": dict(self.params), "state": self.state.value,
            "objective": self.objective, "job": self.job, "run": self.run, "error": self.error,
            "started": self.started, "ended": self.ended,
        }  # fmt: skip


Curve = tuple[tuple[int, float], ...]  # (step, value), by step


@dataclass(frozen=True)
class SweepRecord:
    """A sweep as it stands (see the module docstring): ``rows`` in number order, each
    trial's objective ``curves`` by trial number, ``best``: the best trial's number."""

    name: str
    backend: str = ""
    objective: str = "loss:min"
    space: tuple[str, ...] = ()
    search: str = ""
    trials: int = 0
    parallel: int = 1
    warm: bool = False
    prune_after: int | None = None
    started: float = 0.0
    ended: float | None = None
    state: SweepState = SweepState.RUNNING
    host: str = ""
    pid: int = 0
    rows: tuple[TrialRow, ...] = ()
    curves: Mapping[int, Curve] = field(default_factory=dict)
    best: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, SweepState):  # a word: the edge converts it
            object.__setattr__(self, "state", SweepState(self.state))

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SweepRecord:
        curves = raw.get("curves")
        return cls(
            name=str(raw["name"]),
            backend=str(raw.get("backend") or ""),
            objective=str(raw.get("objective") or "loss:min"),
            space=tuple(str(s) for s in raw.get("space") or ()),
            search=str(raw.get("search") or ""),
            trials=_int(raw.get("trials")) or 0,
            parallel=_int(raw.get("parallel")) or 1,
            warm=bool(raw.get("warm")),
            prune_after=_int(raw.get("prune_after")),
            started=_float(raw.get("started")) or 0.0,
            ended=_float(raw.get("ended")),
            state=SweepState(str(raw.get("state") or SweepState.RUNNING)),
            host=str(raw.get("host") or ""),
            pid=_int(raw.get("pid")) or 0,
            rows=tuple(TrialRow.from_json(r) for r in raw.get("rows") or ()),
            curves={
                int(k): tuple((int(s), float(v)) for s, v in points)
                for k, points in (curves.items() if isinstance(curves, Mapping) else ())
            },
            best=_int(raw.get("best")),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "backend": self.backend, "objective": self.objective,
            "space": list(self.space), "search": self.search, "trials": self.trials,
            "parallel": self.parallel, "warm": self.warm, "prune_after": self.prune_after,
            "started": self.started, "ended": self.ended, "state": self.state.value,
            "host": self.host, "pid": self.pid, "rows": [r.to_json() for r in self.rows],
            "curves": {str(k): [[s, v] for s, v in c] for k, c in self.curves.items()},
            "best": self.best,
        }  # fmt: skip


def sweeps_dir() -> Path:
    return ktrain_home() / "sweeps"


def sweep_file(name: str) -> Path:
    return sweeps_dir() / f"{name}.json"


def keep_sweep(record: SweepRecord) -> None:
    """Write ``record`` (its ``name`` names the file). Raises the store's one error."""
    path = sweep_file(record.name)
    try:
        make_private_dirs(path.parent)
        raw = {**record.to_json(), "version": SWEEP_VERSION}
        data = json.dumps(raw, sort_keys=True, default=str)
        replace_private(path, data.encode())
    except OSError as exc:
        raise store_error(path, exc) from None


def read_sweep(name: str) -> SweepRecord | None:
    """Sweep ``name``'s record; None when there is none. A newer version's is refused with
    the store's one line."""
    path = sweep_file(name)
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    checked = versioned(raw, str(path), "sweep record", SWEEP_VERSION)
    try:
        return SweepRecord.from_json(checked)
    except (KeyError, TypeError, ValueError):  # no sweep's record (no name, a row no number)
        return None


def list_sweeps() -> list[SweepRecord]:
    """Every readable sweep record, newest first."""
    records = []
    for path in sweeps_dir().glob("*.json") if sweeps_dir().is_dir() else ():
        record = read_sweep(path.stem)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: -r.started)


def remove_sweep(name: str) -> bool:
    """Remove sweep ``name``'s record; whether there was one."""
    try:
        sweep_file(name).unlink()
    except FileNotFoundError:
        return False
    return True
