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

The record vocabulary lives here and nowhere else (``wire.py``: the marks, the types, one
record as one line; ``record_types.py``: the typed records; ``lines.py``: a line parsed): one frozen
dataclass per record type
(:class:`Metric`, :class:`Gpu`, :class:`Result`, :class:`Exit`, :class:`Restart`,
:class:`Checkpoint`, :class:`Resume`, a warm job's :class:`Ready`, :class:`Run`, :class:`RunEnd`,
:class:`Stack` and :class:`Profile`), each with ``to_dict``/``format`` (the wire form, one line)
and ``from_dict`` (None for a record that is not one); :func:`parse_record` reads any record
into its class (None for an unknown or malformed one, so an older or newer job's log still
reads). To add a
record: write its dataclass here (its ``TYPE``, who writes it, its fields), add it to
:data:`RECORD_CLASSES`, write it with ``.format()``, and read it where the readers dispatch on
:func:`parse_record` (``MonitorModel._record`` in :mod:`jupyter_ktrain.monitor.model`).
"""

from __future__ import annotations

from .lines import (
    LogLine,
    parse_line,
)
from .record_types import (
    RECORD_CLASSES,
    Checkpoint,
    Exit,
    Gpu,
    Metric,
    Profile,
    Ready,
    Record,
    Restart,
    Result,
    Resume,
    Run,
    RunEnd,
    Stack,
    parse_record,
)
from .wire import (
    AGENT_PREFIX,
    CHECKPOINT,
    EXIT,
    GPU,
    METRIC,
    PROFILE,
    READY,
    RECORD_MARK,
    RECORD_TYPES,
    RESERVED_KEYS,
    RESTART,
    RESULT,
    RESUME,
    RUN,
    RUN_END,
    STACK,
    TYPE,
    format_agent_line,
    format_rank_line,
    format_record,
    metric_values,
    record_type,
)

__all__ = [
    "AGENT_PREFIX",
    "CHECKPOINT",
    "EXIT",
    "GPU",
    "METRIC",
    "PROFILE",
    "READY",
    "RECORD_CLASSES",
    "RECORD_MARK",
    "RECORD_TYPES",
    "RESERVED_KEYS",
    "RESTART",
    "RESULT",
    "RESUME",
    "RUN",
    "RUN_END",
    "STACK",
    "TYPE",
    "Checkpoint",
    "Exit",
    "Gpu",
    "LogLine",
    "Metric",
    "Profile",
    "Ready",
    "Record",
    "Restart",
    "Result",
    "Resume",
    "Run",
    "RunEnd",
    "Stack",
    "format_agent_line",
    "format_rank_line",
    "format_record",
    "metric_values",
    "parse_line",
    "parse_record",
    "record_type",
]
