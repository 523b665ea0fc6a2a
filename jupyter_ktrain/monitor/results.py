"""The cell's results, sent back by rank 0 as a ``result`` record in its output."""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterable
from typing import Any

from ..pod.protocol import RESULT, parse_line, record_type

__all__ = ["decode_results", "results_from_lines"]


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
