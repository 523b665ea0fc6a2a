"""The line protocol between a running job and the monitor.

A node (a pod, or one local torchrun agent) writes one text stream: what every local rank
prints, plus the agent's own records. The in-rank runtime prefixes each line a rank writes with
``[rank{N}]: `` (N is the global rank), so a pod log or a local node log can be split by rank
the same way everywhere. Structured records (training metrics from ``ktrain.report()``, GPU
samples and NCCL transport from the agent, the job's return value) are single lines that start
with :data:`RECORD_MARK` followed by one JSON object with a ``"type"`` key::

    [rank0]: epoch 1 loss 0.52
    [rank0]: @@ktrain {"type": "metric", "step": 10, "loss": 0.52, "t": 1763700000.1}
    [agent]: @@ktrain {"type": "gpu", "node": 0, "gpu": 0, "util": 97.0, ...}
    [agent]: torchrun exited with code 0

Lines with neither prefix (torchrun's own messages, a crash before the runtime started) belong
to the node. This module is pure: no I/O.

A Ray driver prints what its tasks and actors print with Ray's own prefix, ``(fn pid=123,
ip=10.0.0.3) `` (the ``ip`` only from another node, the prefix in ANSI colour unless
``RAY_COLOR_PREFIX=0``, a deduplicated line ending `` [repeated 2x across cluster]``):
:func:`parse_line` reads through that prefix, so a record a Ray task writes is the same record,
and the rest of such a line keeps Ray's prefix as its text.

The record vocabulary lives here and nowhere else: producers and consumers import the record
types (:data:`METRIC`, :data:`GPU`, :data:`RESULT`, :data:`EXIT`, :data:`RESTART`, and a warm
job's :data:`READY`, :data:`RUN`, :data:`RUN_END`) and
:data:`RESERVED_KEYS`. To add a record: name its type here (who writes it, what it carries),
write it with :func:`format_record` (``{TYPE: NEW, ...}``), and read it where the monitor's
model dispatches on :func:`record_type` (``MonitorModel._record`` in
:mod:`jupyter_ktrain.monitor.model`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AGENT_PREFIX",
    "EXIT",
    "GPU",
    "METRIC",
    "READY",
    "RECORD_MARK",
    "RECORD_TYPES",
    "RESERVED_KEYS",
    "RESTART",
    "RESULT",
    "RUN",
    "RUN_END",
    "TYPE",
    "LogLine",
    "format_agent_line",
    "format_rank_line",
    "format_record",
    "metric_values",
    "parse_line",
    "record_type",
]

RECORD_MARK = "@@ktrain "
AGENT_PREFIX = "[agent]: "
_RANK_RE = re.compile(r"^\[rank(\d+)\]: ?")
_ANSI = r"(?:\x1b\[[0-9;]*m)?"
# Ray's prefix of a line a task or actor printed (ray._private.worker.print_worker_logs)
_RAY_RE = re.compile(rf"^{_ANSI}\((?:[^()]* )?pid=\d+(?:, ip=[^()\s]+)?\){_ANSI} ")
_RAY_REPEATED_RE = re.compile(r" \[repeated \d+x across cluster\].*$")

# -- the record vocabulary: every record is {TYPE: one of these, ...} ---------------------------
TYPE = "type"
METRIC = "metric"  # a rank's ktrain.report (pod.report): rank, t, [step, [total]], name=value...
GPU = "gpu"  # one GPU's sample (pod.agent.sampler): node, gpu, uuid, t, util, mem_used, ...
RESULT = "result"  # rank 0's cell results (pod.runtime): values = {name: base64 pickle}
EXIT = "exit"  # a rank's last record (pod.runtime): rank, code
RESTART = "restart"  # an MPIJob launcher re-ran mpirun (pod.agent.relaunch): n, max, why
RUN = "run"  # a warm node's agent starts run N of its job (pod.agent.warm): run, node
RUN_END = "run_end"  # a warm node's run ended (pod.agent.warm): run, node, code, why, aborted
READY = "ready"  # a warm node's agent holds a ready interpreter (pod.agent.warm): node, s
RECORD_TYPES = (METRIC, GPU, RESULT, EXIT, RESTART, RUN, RUN_END, READY)

# The keys of a metric record that are not metrics: ktrain.report refuses them as names, and
# no reader (the monitor, the Prometheus endpoint, trainerStatus) plots or exports them.
RESERVED_KEYS = frozenset({TYPE, "rank", "step", "total", "t", "node"})


@dataclass(frozen=True)
class LogLine:
    """One parsed line. ``rank`` is None for agent and node lines; ``record`` is the decoded
    structured record when the line carries one (then ``text`` is the raw JSON)."""

    text: str
    rank: int | None = None
    source: str = "rank"  # "rank" | "agent" | "node"
    record: dict[str, Any] | None = None


def format_rank_line(rank: int, text: str) -> str:
    return f"[rank{rank}]: {text}"


def format_agent_line(text: str) -> str:
    return AGENT_PREFIX + text


def format_record(record: dict[str, Any]) -> str:
    """One record as a line body (no newline). Compact JSON, no NaN surprises for the reader."""
    return RECORD_MARK + json.dumps(record, separators=(",", ":"), default=str)


def _record(text: str) -> dict[str, Any] | None:
    if not text.startswith(RECORD_MARK):
        return None
    try:
        value = json.loads(text[len(RECORD_MARK) :])
    except ValueError:
        return None
    return value if isinstance(value, dict) and TYPE in value else None


def record_type(record: Mapping[str, Any] | None) -> str | None:
    """The record's type (one of :data:`RECORD_TYPES`, or a newer one), None for no record."""
    kind = record.get(TYPE) if record is not None else None
    return kind if isinstance(kind, str) else None


def metric_values(record: Mapping[str, Any]) -> dict[str, float]:
    """The named numbers a metric record carries: every key but :data:`RESERVED_KEYS`, whose
    value is a number (not a bool)."""
    return {
        name: float(value)
        for name, value in record.items()
        if name not in RESERVED_KEYS
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
    }


def _through_ray(text: str) -> str:
    """``text`` past Ray's prefix of a task's line (and its dedup note), else ``text``."""
    m = _RAY_RE.match(text)
    return _RAY_REPEATED_RE.sub("", text[m.end() :]) if m else text


def _line(text: str, rank: int | None, source: str) -> LogLine:
    body = _through_ray(text)
    record = _record(body)
    return LogLine(text=body if record is not None else text, rank=rank, source=source,
                   record=record)  # fmt: skip


def parse_line(line: str) -> LogLine:
    """Split one line (without its newline) into rank/agent/node, text and record."""
    ray = _RAY_RE.match(line)
    if ray:  # Ray's prefix outermost: a driver's own stdout, not the runtime's
        inner = parse_line(_through_ray(line))
        return inner if inner.record is not None else _line(line, inner.rank, inner.source)
    m = _RANK_RE.match(line)
    if m:
        return _line(line[m.end() :], int(m.group(1)), "rank")
    if line.startswith(AGENT_PREFIX):
        return _line(line[len(AGENT_PREFIX) :], None, "agent")
    return _line(line, None, "node")
