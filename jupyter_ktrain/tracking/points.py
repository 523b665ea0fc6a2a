"""What a tracking server gets from a job's lines: the one reader of the records for tracking.

:class:`RecordReader` turns each parsed line (:func:`~jupyter_ktrain.pod.protocol.parse_line`)
into :class:`Point` s and tags, through :mod:`jupyter_ktrain.pod.protocol` only:

- a ``ktrain.report`` (or Hugging Face Trainer) metric: one point per value, keyed by the
  name for rank 0 and ``rank{N}/name`` for another rank, at the record's ``step``; a record
  without a step gets the series' ordinal (0, 1, 2 ...), the same on every replay of the log;
- a GPU sample: MLflow's system-metric names (``system/node_{N}/gpu_{G}_utilization_percentage``,
  ``..._memory_usage_megabytes``, ``..._memory_usage_percentage``, ``..._power_usage_watts``,
  ``..._temperature_celsius``), the step the sample's ordinal for that GPU;
- a launcher restart or a checkpoint resume: tags (``ktrain.launcher_restarts``,
  ``ktrain.resumes``, ``ktrain.resumed_from_step``).

:class:`SentSteps` remembers which ``(key, step)`` went out, as ranges (a run of consecutive
steps costs two numbers), so a replay (a kernel re-attached, a restarted rank reporting its
steps again) sends nothing twice. Pure: no I/O.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..pod.protocol import GPU, METRIC, RESTART, LogLine, metric_values, record_type

__all__ = ["Point", "Reading", "RecordReader", "SentSteps", "metric_key"]

_MIB = 1024 * 1024
# the GPU record's field -> (MLflow system metric suffix, factor)
_GPU_NAMES = (
    ("util", "utilization_percentage", 1.0),
    ("mem_used", "memory_usage_megabytes", _MIB / 1e6),  # the agent's MiB, MLflow's MB
    ("power", "power_usage_watts", 1.0),
    ("temp", "temperature_celsius", 1.0),
)


@dataclass(frozen=True)
class Point:
    """One metric point: ``timestamp`` in epoch milliseconds, as MLflow wants it."""

    key: str
    value: float
    step: int
    timestamp: int


@dataclass
class Reading:
    """What one line gave: points and tags (both may be empty)."""

    points: list[Point] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


def metric_key(name: str, rank: int) -> str:
    """Rank 0's metric under its own name, another rank's as ``rank{N}/name``."""
    return name if rank == 0 else f"rank{rank}/{name}"


class RecordReader:
    """Lines -> points and tags (see the module docstring). Feed one job's lines, in the
    order each replica wrote them; the ordinals of step-less series follow that order."""

    def __init__(self) -> None:
        self._ordinals: dict[str, int] = {}
        self.resumes = 0

    def _next(self, key: str) -> int:
        n = self._ordinals.get(key, 0)
        self._ordinals[key] = n + 1
        return n

    def read(self, line: LogLine, now: float, node: int = 0) -> Reading:
        """The points and tags of one line that arrived at ``now`` (epoch seconds) from the
        replica numbered ``node``; an empty reading for a plain line."""
        out = Reading()
        rec = line.record
        if rec is None:
            return out
        kind = record_type(rec)
        ms = _millis(rec.get("t"), now)
        if kind == METRIC:
            rank = line.rank if line.rank is not None else rec.get("rank")
            if not isinstance(rank, int):
                return out
            step = rec.get("step")
            for name, value in metric_values(rec).items():
                key = metric_key(name, rank)
                s = step if isinstance(step, int) and not isinstance(step, bool) else None
                out.points.append(Point(key, value, self._next(key) if s is None else s, ms))
        elif kind == GPU:
            out.points += self._gpu(rec, ms, node)
        elif kind == RESTART and isinstance(rec.get("n"), int):
            out.tags["ktrain.launcher_restarts"] = str(rec["n"])
        elif kind == "resume" and isinstance(rec.get("step"), int):
            self.resumes += 1
            out.tags["ktrain.resumes"] = str(self.resumes)
            out.tags["ktrain.resumed_from_step"] = str(rec["step"])
        return out

    def _gpu(self, rec: Mapping[str, Any], ms: int, node: int) -> list[Point]:
        n = rec.get("node", node)
        g = rec.get("gpu")
        if not isinstance(n, int) or not isinstance(g, int):
            return []
        prefix = f"system/node_{n}/gpu_{g}_"
        step = self._next(prefix)
        points = []
        for field_name, suffix, factor in _GPU_NAMES:
            value = rec.get(field_name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                points.append(Point(prefix + suffix, float(value) * factor, step, ms))
        used, total = rec.get("mem_used"), rec.get("mem_total")
        if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total > 0:
            pct = 100.0 * float(used) / float(total)
            points.append(Point(prefix + "memory_usage_percentage", pct, step, ms))
        return points


def _millis(t: Any, now: float) -> int:
    seconds = float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else now
    return int(seconds * 1000)


class SentSteps:
    """Per metric key, the steps already sent, as sorted disjoint ``[lo, hi]`` ranges."""

    def __init__(self, ranges: Mapping[str, Iterable[Iterable[int]]] | None = None) -> None:
        self._ranges: dict[str, list[list[int]]] = {
            key: sorted([int(lo), int(hi)] for lo, hi in spans)
            for key, spans in (ranges or {}).items()
        }

    def __contains__(self, item: tuple[str, int]) -> bool:
        key, step = item
        spans = self._ranges.get(key)
        if not spans:
            return False
        i = bisect.bisect_right(spans, [step, float("inf")]) - 1
        return i >= 0 and spans[i][0] <= step <= spans[i][1]

    def add(self, key: str, step: int) -> None:
        spans = self._ranges.setdefault(key, [])
        if spans and spans[-1][1] + 1 == step:  # the common case: the next step of a series
            spans[-1][1] = step
            return
        if (key, step) in self:
            return
        i = bisect.bisect_left(spans, [step, step])
        spans.insert(i, [step, step])
        # merge with the neighbours it touches
        if i + 1 < len(spans) and spans[i + 1][0] == step + 1:
            spans[i][1] = spans.pop(i + 1)[1]
        if i > 0 and spans[i - 1][1] + 1 == step:
            spans[i - 1][1] = spans.pop(i)[1]

    def count(self) -> int:
        """How many (key, step) pairs were sent."""
        return sum(hi - lo + 1 for spans in self._ranges.values() for lo, hi in spans)

    def as_dict(self) -> dict[str, list[list[int]]]:
        return {key: [list(s) for s in spans] for key, spans in self._ranges.items() if spans}
