"""What a profile of a few steps says, from the profiler's own events: the top operators and
the share of the window spent computing, communicating and waiting. Pure (no I/O, no torch):
it reads the events of a Chrome trace (``torch.profiler``'s ``export_chrome_trace``, a dict
with ``traceEvents``), so the rank (:mod:`.profiler`) and a test read the same thing.

- On a GPU (the trace has ``kernel`` events) the operators are the CUDA kernels, by device
  time; compute is the time some kernel (or copy) that is not a collective runs,
  communication the time only a collective kernel (NCCL) runs, waiting the rest of the
  window (the GPU idle: Python, data loading, the CPU launching late).
- Otherwise the operators are the CPU operators (``cpu_op``) and the collectives the process
  group runs on its own threads (gloo's ``gloo:all_reduce``), by self time (an operator's
  time less that of the operators it called); compute is the time some operator that is not
  a collective runs on any thread, communication the time a collective runs while no
  operator computes (communication hidden behind compute is not counted twice), waiting the
  time neither runs (Python between operators, data loading, sleeps).

A collective is named so (:func:`is_collective`): ``allreduce``, ``all_gather``,
``broadcast``, ``c10d::``, ``nccl``, ``gloo`` ... in an event's name, never an ``aten::`` op.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COLLECTIVE_MARKS", "Summary", "is_collective", "summarize", "union_s"]

COLLECTIVE_MARKS = (
    "allreduce", "all_reduce", "all_gather", "allgather", "reduce_scatter", "reducescatter",
    "broadcast", "alltoall", "all_to_all", "barrier", "c10d::", "nccl", "gloo",
)  # fmt: skip
TOP = 15  # operators kept per rank
_GPU_COMPUTE = ("kernel", "gpu_memcpy", "gpu_memset")

Interval = tuple[float, float]  # start, end in µs


@dataclass(frozen=True)
class Summary:
    """A profile's figures: ``device`` ("cuda" or "cpu"), the ``window`` in seconds, the
    seconds of ``compute``, ``communication`` and ``waiting`` (they add up to the window),
    and the top ``ops``: (name, calls, seconds), most time first."""

    device: str
    window: float
    compute: float
    communication: float
    waiting: float
    ops: tuple[tuple[str, int, float], ...]


def is_collective(name: str) -> bool:
    """``name`` is a collective's (an operator, annotation or kernel of communication)."""
    low = name.lower()
    return not low.startswith("aten::") and any(mark in low for mark in COLLECTIVE_MARKS)


def union_s(intervals: Iterable[Interval]) -> float:
    """The time (in the intervals' unit) that at least one of ``intervals`` covers."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def _spans(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The complete events (``ph`` X) with a start and a duration."""
    return [
        e
        for e in events
        if e.get("ph") == "X"
        and isinstance(e.get("ts"), (int, float))
        and isinstance(e.get("dur"), (int, float))
    ]


def _window(spans: Sequence[Mapping[str, Any]]) -> Interval:
    """The profiled window: the profiler's own ``Trace`` event, else the events' span."""
    for e in spans:
        if e.get("cat") == "Trace":
            return float(e["ts"]), float(e["ts"]) + float(e["dur"])
    if not spans:
        return 0.0, 0.0
    return min(float(e["ts"]) for e in spans), max(float(e["ts"]) + float(e["dur"]) for e in spans)


def _clip(e: Mapping[str, Any], window: Interval) -> Interval:
    lo, hi = float(e["ts"]), float(e["ts"]) + float(e["dur"])
    return max(lo, window[0]), max(min(hi, window[1]), max(lo, window[0]))


def _self_times(ops: Sequence[Mapping[str, Any]]) -> list[float]:
    """Each op's self time: its duration less its direct children's, on its own thread."""
    self_us = [float(e["dur"]) for e in ops]
    threads: dict[tuple[Any, Any], list[int]] = {}
    for i, e in enumerate(ops):
        threads.setdefault((e.get("pid"), e.get("tid")), []).append(i)
    for members in threads.values():
        members.sort(key=lambda i: (float(ops[i]["ts"]), -float(ops[i]["dur"])))
        stack: list[int] = []
        for i in members:
            start = float(ops[i]["ts"])
            while stack and float(ops[stack[-1]]["ts"]) + float(ops[stack[-1]]["dur"]) <= start:
                stack.pop()
            if stack:
                self_us[stack[-1]] -= float(ops[i]["dur"])
            stack.append(i)
    return [max(s, 0.0) for s in self_us]


def _top(
    ops: Sequence[Mapping[str, Any]], times_us: Sequence[float], top: int
) -> tuple[tuple[str, int, float], ...]:
    by_name: dict[str, list[float]] = {}
    for e, t in zip(ops, times_us, strict=True):
        row = by_name.setdefault(str(e.get("name", "?")), [0, 0.0])
        row[0] += 1
        row[1] += t
    rows = sorted(by_name.items(), key=lambda r: (-r[1][1], r[0]))[:top]
    return tuple((name, int(calls), round(us / 1e6, 6)) for name, (calls, us) in rows)


def summarize(trace: Mapping[str, Any], top: int = TOP) -> Summary:
    """The :class:`Summary` of a Chrome trace (see the module's docstring)."""
    raw = trace.get("traceEvents")
    spans = _spans(raw if isinstance(raw, list) else [])
    window = _window(spans)
    gpu = any(e.get("cat") == "kernel" for e in spans)
    if gpu:
        ops = [e for e in spans if e.get("cat") == "kernel"]
        busy = [e for e in spans if e.get("cat") in _GPU_COMPUTE]
        times = [float(e["dur"]) for e in ops]
    else:
        ops = [
            e
            for e in spans
            if e.get("cat") == "cpu_op"
            or (e.get("cat") == "user_annotation" and is_collective(str(e.get("name", ""))))
        ]
        busy = ops
        times = _self_times(ops)
    comm = [_clip(e, window) for e in busy if is_collective(str(e.get("name", "")))]
    compute = [_clip(e, window) for e in busy if not is_collective(str(e.get("name", "")))]
    computing = union_s(compute)
    either = union_s(compute + comm)
    length = window[1] - window[0]
    return Summary(
        device="cuda" if gpu else "cpu",
        window=round(length / 1e6, 6),
        compute=round(computing / 1e6, 6),
        communication=round((either - computing) / 1e6, 6),
        waiting=round(max(length - either, 0.0) / 1e6, 6),
        ops=_top(ops, times, top),
    )
