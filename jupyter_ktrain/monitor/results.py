"""What a job's stored output gives after the fact: the cell's results (rank 0's
:data:`~jupyter_ktrain.pod.protocol.RESULT` record) and its progress history."""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterable
from typing import Any

from ..pod.progress import Progress, ProgressTracker
from ..pod.protocol import RESULT, parse_line, record_type

__all__ = ["decode_results", "progress_from_logs", "results_from_lines"]


def decode_results(record: dict[str, Any]) -> dict[str, Any]:
    """Unpickle a :data:`~jupyter_ktrain.pod.protocol.RESULT` record's values. Classes the
    notebook defined resolve to the kernel's own (``__main__``), so instances come back as the
    user's types."""
    values = record.get("values") or {}
    return {name: pickle.loads(base64.b64decode(data)) for name, data in values.items()}


def results_from_lines(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last result record from rank 0 among raw log lines, or None if there is none."""
    found: dict[str, Any] | None = None
    for raw in lines:
        line = parse_line(raw)
        if line.rank == 0 and record_type(line.record) == RESULT:
            found = line.record
    return decode_results(found) if found is not None else None


def progress_from_logs(lines: Iterable[tuple[str, str]]) -> list[Progress]:
    """Every progress update of a job, replayed from its stored ``(replica, raw line)`` pairs
    through the tracker the views use (the lowest reporting rank's records, in order)."""
    records = []
    for _replica, raw in lines:
        line = parse_line(raw)
        rec = line.record
        if line.rank is None or rec is None or not isinstance(rec.get("total"), int):
            continue
        if isinstance(rec.get("step"), int) and isinstance(rec.get("t"), (int, float)):
            records.append((line.rank, rec))
    if not records:
        return []
    first = min(rank for rank, _ in records)
    tracker = ProgressTracker()
    return [
        tracker.update(rec["step"], rec["total"], float(rec["t"]))
        for rank, rec in records
        if rank == first
    ]
