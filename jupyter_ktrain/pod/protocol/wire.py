"""The wire form of the line protocol: the marks, the record vocabulary (every record is
``{TYPE: one of these, ...}``) and one record as one line. Pure: no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

RECORD_MARK = "@@ktrain "
AGENT_PREFIX = "[agent]: "

# -- the record vocabulary: every record is {TYPE: one of these, ...} ---------------------------
TYPE = "type"
METRIC = "metric"  # a rank's ktrain.report (pod.report): rank, t, [step, [total]], name=value...
GPU = "gpu"  # one GPU's sample (pod.agent.sampler): node, gpu, uuid, t, util, mem_used, ...
RESULT = "result"  # rank 0's cell results (pod.cell): values = {name: base64 pickle}
EXIT = "exit"  # a rank's last record (pod.program): rank, code
RESTART = "restart"  # an MPIJob launcher re-ran mpirun (pod.agent.relaunch): n, max, why
RUN = "run"  # a warm node's agent starts run N of its job (pod.agent.warm): run, node
RUN_END = "run_end"  # a warm node's run ended (pod.agent.warm): run, node, code, why, aborted
READY = "ready"  # a warm node's agent holds a ready interpreter (pod.agent.warm): node, s
STACK = "stack"  # a rank's stacks, asked by `ktrain stacks` (pod.stacks): rank, pid, threads
PROFILE = "profile"  # a rank's profile of N steps, asked by `ktrain profile` (pod.profiler)
CHECKPOINT = "checkpoint"  # a rank saved a checkpoint (pod.checkpoint): step, bytes, seconds...
RESUME = "resume"  # rank 0 loaded a checkpoint (pod.checkpoint): step, file, world_size
RECORD_TYPES = (METRIC, GPU, RESULT, EXIT, RESTART, CHECKPOINT, RESUME, RUN, RUN_END, READY,
                STACK, PROFILE)  # fmt: skip

# The keys of a metric record that are not metrics: ktrain.report refuses them as names, and
# no reader (the monitor, the Prometheus endpoint, trainerStatus) plots or exports them.
RESERVED_KEYS = frozenset({TYPE, "rank", "step", "total", "t", "node"})


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
