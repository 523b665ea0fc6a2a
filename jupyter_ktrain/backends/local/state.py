"""What a local job's supervisor writes back: :class:`LocalState`, the job folder's
``state.json`` (and a warm job's run's, ``runs/N/state.json``), read by the backend and the warm
code (:func:`read_state`) and written by the supervisor, its watchdog, a cancel and the warm code
(:func:`save_state`, :func:`change_state`).

``state.json`` carries a ``version`` (:data:`STATE_VERSION`). A file written before versions
existed reads as version 1 (a missing entry takes its default); one written by a newer
jupyter-ktrain is refused with one line that says so (:class:`StateError`). Every write goes
through the job store's lock (:mod:`jupyter_ktrain.store.jobdirs`), and the first final state
written stands.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import BackendError
from ...jobs import PENDING, JobState, ReplicaPhase
from ...pod.progress import Progress
from ...store import jobdirs
from ...store.versions import versioned
from ..warm_shape import DEFAULT_IDLE_S

__all__ = [
    "STATE_VERSION",
    "LocalState",
    "NodeState",
    "StateError",
    "WarmState",
    "change_state",
    "read_state",
    "save_state",
]

STATE_VERSION = 1


class StateError(BackendError, ValueError):
    """A ``state.json`` this version cannot read (a newer one's, or no state)."""


@dataclass(frozen=True)
class NodeState:
    """One node: its agent's pid, exit code once it ended, restarts, and why it last
    restarted; ``phase`` only while the supervisor says it (``Restarting``)."""

    pid: int | None = None
    exit_code: int | None = None
    restarts: int = 0
    last_event: str = ""
    phase: ReplicaPhase | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "pid": self.pid,
            "exit_code": self.exit_code,
            "restarts": self.restarts,
            "last_event": self.last_event,
        }
        return {**out, "phase": self.phase.value} if self.phase is not None else out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> NodeState:
        return cls(
            pid=_int_or_none(raw.get("pid")),
            exit_code=_int_or_none(raw.get("exit_code")),
            restarts=int(raw.get("restarts") or 0),
            last_event=str(raw.get("last_event") or ""),
            phase=ReplicaPhase(raw["phase"]) if raw.get("phase") else None,
        )


@dataclass(frozen=True)
class WarmState:
    """A warm job between and during runs: runs so far, the run in progress, since when it is
    idle, its idle limit, and how many of its nodes are ready (their agents imported torch;
    None in a file from before this was kept)."""

    runs: int = 0
    active: int | None = None
    idle_since: float | None = None
    idle_limit_s: float = DEFAULT_IDLE_S
    ready: int | None = None

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> WarmState:
        return cls(
            runs=int(raw.get("runs") or 0),
            active=_int_or_none(raw.get("active")),
            idle_since=_float_or_none(raw.get("idle_since")),
            idle_limit_s=float(raw.get("idle_limit_s", DEFAULT_IDLE_S)),
            ready=_int_or_none(raw.get("ready")),
        )


@dataclass(frozen=True)
class LocalState:
    """A local job's (or a warm job's run's) state as its supervisor keeps it. ``exit_codes``
    by rank; ``failed_rank`` the first rank that failed; ``supervisor_start`` tells the live
    supervisor from a later process with its pid; ``supervisor_end`` is the watchdog's word
    when the supervisor died; ``master_port`` the rendezvous port after a restart moved it."""

    state: JobState = PENDING
    reason: str = ""
    message: str = ""
    run: int | None = None  # a warm job's run: its number
    supervisor_pid: int | None = None
    supervisor_start: int | None = None
    supervisor_end: str = ""
    created: float | None = None
    started: float | None = None
    finished: float | None = None
    nodes: tuple[NodeState, ...] = ()
    restarts: int = 0
    max_restarts: int | None = None
    exit_codes: Mapping[int, int] = field(default_factory=dict)
    failed_rank: int | None = None
    failed_node: int | None = None
    progress: Progress | None = None
    master_port: int | None = None
    warm: WarmState | None = None

    def to_json(self) -> dict[str, object]:
        """``state.json``'s content."""
        return {"version": STATE_VERSION, **{f.name: self._encode(f.name) for f in _FIELDS}}

    def _encode(self, name: str) -> object:
        value = getattr(self, name)
        if name == "state":
            return str(value)
        if name == "nodes":
            return [n.to_json() for n in value]
        if name == "exit_codes":
            return {str(k): v for k, v in sorted(value.items())}
        if isinstance(value, (Progress,)):
            return value.to_dict()
        if isinstance(value, WarmState):
            return value.to_json()
        return value

    @classmethod
    def encode(cls, changes: Mapping[str, Any]) -> dict[str, object]:
        """``changes`` (field names and values) as the entries of ``state.json`` they write;
        TypeError for a name that is no field."""
        whole = dataclasses.replace(cls(), **changes)
        return {"version": STATE_VERSION, **{k: whole._encode(k) for k in changes}}

    @classmethod
    def from_json(cls, raw: object, where: str = "state.json") -> LocalState:
        """Inverse of :meth:`to_json`, for this version's files and older ones;
        :class:`StateError` with one line for a newer one's or for what is no state."""
        raw = versioned(raw, where, "job state", STATE_VERSION, StateError)
        try:
            warm = raw.get("warm")
            return cls(
                state=JobState(raw.get("state") or PENDING),
                reason=str(raw.get("reason") or ""),
                message=str(raw.get("message") or ""),
                run=_int_or_none(raw.get("run")),
                supervisor_pid=_int_or_none(raw.get("supervisor_pid")),
                supervisor_start=_int_or_none(raw.get("supervisor_start")),
                supervisor_end=str(raw.get("supervisor_end") or ""),
                created=_float_or_none(raw.get("created")),
                started=_float_or_none(raw.get("started")),
                finished=_float_or_none(raw.get("finished")),
                nodes=tuple(NodeState.from_json(n) for n in raw.get("nodes") or ()),
                restarts=int(raw.get("restarts") or 0),
                max_restarts=_int_or_none(raw.get("max_restarts")),
                exit_codes={int(k): int(v) for k, v in (raw.get("exit_codes") or {}).items()},
                failed_rank=_int_or_none(raw.get("failed_rank")),
                failed_node=_int_or_none(raw.get("failed_node")),
                progress=Progress.from_dict(raw.get("progress")),
                master_port=_int_or_none(raw.get("master_port")),
                warm=WarmState.from_json(warm) if isinstance(warm, dict) else None,
            )
        except (AttributeError, TypeError, ValueError) as exc:
            raise StateError(f"{where} is not a job's state ({exc})") from exc


_FIELDS = dataclasses.fields(LocalState)


def read_state(folder: Path) -> LocalState | None:
    """The folder's ``state.json`` (a job's, or a run's); None before anyone wrote it."""
    raw = jobdirs.read_state(folder)
    return None if raw is None else LocalState.from_json(raw, f"{folder.name}/state.json")


def save_state(folder: Path, state: LocalState, marker: str | None = None) -> bool:
    """Write ``state`` whole unless the folder already holds a final state (then False); with
    ``marker``, only while the folder still holds that job
    (:func:`~jupyter_ktrain.store.jobdirs.update_state`)."""
    return jobdirs.update_state(folder, state.to_json(), marker)


def change_state(folder: Path, marker: str | None = None, **changes: Any) -> bool:
    """Write these fields of :class:`LocalState`, keeping the others, unless the folder already
    holds a final state (then False); ``marker`` as in :func:`save_state`."""
    return jobdirs.update_state(folder, LocalState.encode(changes), marker)


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _float_or_none(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
