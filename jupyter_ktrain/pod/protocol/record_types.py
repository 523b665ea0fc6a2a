"""The records, typed: one frozen dataclass per record type, the wire form (:mod:`.wire`)
unchanged; :func:`parse_record` reads any record into its class. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .wire import (
    CHECKPOINT,
    EXIT,
    GPU,
    METRIC,
    PROFILE,
    READY,
    RESTART,
    RESULT,
    RESUME,
    RUN,
    RUN_END,
    STACK,
    TYPE,
    format_record,
    metric_values,
    record_type,
)


# -- the records, typed: one frozen dataclass per type, the wire form unchanged ----------------
def _int(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(raw: Mapping[str, Any], key: str) -> float | None:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _str(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    return value if isinstance(value, str) else ""


def _some(**fields: Any) -> dict[str, Any]:
    """The fields that are set (None leaves a key out of the wire form)."""
    return {key: value for key, value in fields.items() if value is not None}


class _Record:
    """What every record class has: its ``TYPE`` and its one line (``format``)."""

    TYPE: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def format(self) -> str:
        """The record as a line body (no newline, no rank prefix): see :func:`format_record`."""
        return format_record(self.to_dict())


@dataclass(frozen=True)
class Metric(_Record):
    """A rank's ``ktrain.report`` (:mod:`.report`): the named numbers at ``step`` (of
    ``total``); a record with a ``total`` is also the job's progress (:mod:`.progress`)."""

    TYPE: ClassVar[str] = METRIC
    rank: int | None
    t: float | None
    step: int | None = None
    total: int | None = None
    values: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        head = _some(rank=self.rank, t=self.t, step=self.step, total=self.total)
        return {TYPE: METRIC, **head, **self.values}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Metric | None:
        return cls(_int(raw, "rank"), _num(raw, "t"), _int(raw, "step"), _int(raw, "total"),
                   metric_values(raw))  # fmt: skip


@dataclass(frozen=True)
class Gpu(_Record):
    """One GPU's sample (:mod:`.agent.sampler`); a reading NVML cannot take is None (left out)."""

    TYPE: ClassVar[str] = GPU
    node: int | None
    gpu: int
    uuid: str
    t: float | None
    util: float | None = None
    power: float | None = None
    temp: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: GPU, **_some(node=self.node), "gpu": self.gpu, "uuid": self.uuid,
                **_some(t=self.t, util=self.util, power=self.power, temp=self.temp,
                        mem_used=self.mem_used, mem_total=self.mem_total)}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Gpu | None:
        gpu = _int(raw, "gpu")
        if gpu is None:
            return None
        readings = {k: _num(raw, k) for k in ("util", "power", "temp", "mem_used", "mem_total")}
        return cls(_int(raw, "node"), gpu, _str(raw, "uuid"), _num(raw, "t"), **readings)


@dataclass(frozen=True)
class Result(_Record):
    """Rank 0's cell results (:mod:`.cell`): ``values`` = {name: base64 of a pickle}."""

    TYPE: ClassVar[str] = RESULT
    values: Mapping[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: RESULT, "values": dict(self.values)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Result | None:
        values = raw.get("values") or {}
        return cls(dict(values)) if isinstance(values, dict) else None


@dataclass(frozen=True)
class Exit(_Record):
    """A rank's last record (:mod:`.program`): its exit code (1 when a record lacks one)."""

    TYPE: ClassVar[str] = EXIT
    rank: int | None
    code: int

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: EXIT, **_some(rank=self.rank), "code": self.code}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Exit | None:
        code = _int(raw, "code")
        return cls(_int(raw, "rank"), 1 if code is None else code)


@dataclass(frozen=True)
class Restart(_Record):
    """An MPIJob launcher re-ran mpirun (:mod:`.agent.relaunch`): restart ``n`` of ``max``."""

    TYPE: ClassVar[str] = RESTART
    n: int | None
    max: int | None
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: RESTART, "n": self.n, "max": self.max, "why": self.why}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Restart | None:
        return cls(_int(raw, "n"), _int(raw, "max"), _str(raw, "why"))


@dataclass(frozen=True)
class Checkpoint(_Record):
    """A rank saved a checkpoint (:mod:`.checkpoint`): ``seconds`` from the call to on disk,
    ``blocked_s`` training waited, ``write_s`` the background write; ``rank``/``t`` added by
    :func:`.report.emit`."""

    TYPE: ClassVar[str] = CHECKPOINT
    step: int
    bytes: int | None = None
    seconds: float | None = None
    blocked_s: float | None = None
    write_s: float | None = None
    file: str = ""
    world_size: int | None = None
    rank: int | None = None
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: self.TYPE, "step": self.step, "bytes": self.bytes, "seconds": self.seconds,
                "blocked_s": self.blocked_s, "write_s": self.write_s, "file": self.file,
                "world_size": self.world_size, **_some(rank=self.rank, t=self.t)}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Checkpoint | None:
        step = _int(raw, "step")
        if step is None:
            return None
        return cls(step, _int(raw, "bytes"), _num(raw, "seconds"), _num(raw, "blocked_s"),
                   _num(raw, "write_s"), _str(raw, "file"), _int(raw, "world_size"),
                   _int(raw, "rank"), _num(raw, "t"))  # fmt: skip


@dataclass(frozen=True)
class Resume(_Record):
    """Rank 0 loaded a checkpoint (:mod:`.checkpoint`): training goes on from ``step``."""

    TYPE: ClassVar[str] = RESUME
    step: int
    file: str = ""
    world_size: int | None = None
    rank: int | None = None
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: self.TYPE, "step": self.step, "file": self.file,
                "world_size": self.world_size, **_some(rank=self.rank, t=self.t)}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Resume | None:
        step = _int(raw, "step")
        if step is None:
            return None
        return cls(step, _str(raw, "file"), _int(raw, "world_size"), _int(raw, "rank"),
                   _num(raw, "t"))  # fmt: skip


@dataclass(frozen=True)
class Run(_Record):
    """A warm node's agent starts run ``run`` of its job (:mod:`.agent.warm`)."""

    TYPE: ClassVar[str] = RUN
    run: int
    node: int | None
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: RUN, "run": self.run, "node": self.node, **_some(t=self.t)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Run | None:
        run = _int(raw, "run")
        return None if run is None else cls(run, _int(raw, "node"), _num(raw, "t"))


@dataclass(frozen=True)
class RunEnd(_Record):
    """A warm node's run ended (:mod:`.agent.warm`): its code, why, and what aborted it."""

    TYPE: ClassVar[str] = RUN_END
    run: int
    node: int | None
    code: int | None
    why: str = ""
    aborted: str = ""
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: RUN_END, "run": self.run, "node": self.node, "code": self.code,
                "why": self.why, "aborted": self.aborted, **_some(t=self.t)}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RunEnd | None:
        run = _int(raw, "run")
        if run is None:
            return None
        return cls(run, _int(raw, "node"), _int(raw, "code"), _str(raw, "why"),
                   _str(raw, "aborted"), _num(raw, "t"))  # fmt: skip


@dataclass(frozen=True)
class Ready(_Record):
    """A warm node's agent holds a ready interpreter (:mod:`.agent.warm`), after ``s`` s."""

    TYPE: ClassVar[str] = READY
    node: int | None
    s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: READY, "node": self.node, "s": self.s}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Ready | None:
        return cls(_int(raw, "node"), _num(raw, "s"))


@dataclass(frozen=True)
class Stack(_Record):
    """A rank's Python stack, every thread (:mod:`.stacks`): ``threads`` are (name, frames),
    the main thread first; a frame is (file, line, function, source line), outermost first,
    one in the notebook's code named ``cell [N]`` as its tracebacks name it. ``why``: a rank
    that gave none says why (no answer in time)."""

    TYPE: ClassVar[str] = STACK
    rank: int | None
    pid: int | None = None
    threads: tuple[tuple[str, tuple[tuple[str, int, str, str], ...]], ...] = ()
    why: str = ""
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        threads = [{"name": n, "frames": [list(f) for f in fs]} for n, fs in self.threads]
        return {TYPE: STACK, "rank": self.rank, "pid": self.pid, "threads": threads,
                **({"why": self.why} if self.why else {}), **_some(t=self.t)}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Stack | None:
        try:
            threads = tuple(
                (str(t["name"]), tuple((str(a), int(n), str(w), str(c)) for a, n, w, c in fs))
                for t in raw.get("threads") or ()
                for fs in [t["frames"]]
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None
        return cls(_int(raw, "rank"), _int(raw, "pid"), threads, _str(raw, "why"), _num(raw, "t"))


@dataclass(frozen=True)
class Profile(_Record):
    """A rank's profile of steps ``first`` to ``last`` (:mod:`.profiler`, figures from
    :mod:`.profile_summary`): seconds of the ``window``, of ``compute``, ``communication`` and
    ``waiting``; the top ``ops`` (name, calls, seconds of CUDA time on ``device`` "cuda", else
    CPU time); ``trace``: its Chrome trace, gzip then base64 ("" when left out: ``note`` says
    why). ``why``: a rank that took none says why; ``no_steps``: because it marks no steps."""

    TYPE: ClassVar[str] = PROFILE
    rank: int | None
    pid: int | None = None
    first: int | None = None
    last: int | None = None
    device: str = ""
    window: float = 0.0
    compute: float = 0.0
    communication: float = 0.0
    waiting: float = 0.0
    ops: tuple[tuple[str, int, float], ...] = ()
    trace: str = ""
    note: str = ""
    why: str = ""
    no_steps: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {TYPE: PROFILE, **{f: getattr(self, f) for f in _PROFILE_FIELDS},
                "ops": [list(op) for op in self.ops]}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Profile | None:
        try:
            ops = tuple((str(n), int(c), float(s)) for n, c, s in raw.get("ops") or ())
        except (TypeError, ValueError):
            return None
        n = [_num(raw, k) or 0.0 for k in ("window", "compute", "communication", "waiting")]
        return cls(_int(raw, "rank"), _int(raw, "pid"), _int(raw, "first"), _int(raw, "last"),
                   _str(raw, "device"), n[0], n[1], n[2], n[3], ops, _str(raw, "trace"),
                   _str(raw, "note"), _str(raw, "why"), raw.get("no_steps") is True)  # fmt: skip


_PROFILE_FIELDS = ("rank", "pid", "first", "last", "device", "window", "compute",
                   "communication", "waiting", "trace", "note", "why", "no_steps")  # fmt: skip

Record = (Metric | Gpu | Result | Exit | Restart | Checkpoint | Resume | Run | RunEnd | Ready
          | Stack | Profile)  # fmt: skip
RECORD_CLASSES: tuple[type[Record], ...] = (
    Metric, Gpu, Result, Exit, Restart, Checkpoint, Resume, Run, RunEnd, Ready, Stack, Profile
)  # fmt: skip
_BY_TYPE: dict[str, type[Record]] = {cls.TYPE: cls for cls in RECORD_CLASSES}


def parse_record(raw: Mapping[str, Any] | None) -> Record | None:
    """``raw`` (a decoded record) as its typed record; None for no record, an unknown type (a
    newer job's) or one whose required fields are missing or of the wrong type."""
    cls = _BY_TYPE.get(record_type(raw) or "")
    return None if cls is None or raw is None else cls.from_dict(raw)
