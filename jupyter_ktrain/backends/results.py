"""What a job's stored output gives after the fact: the cell's results (rank 0's
:data:`~jupyter_ktrain.pod.protocol.RESULT` record) and its progress history."""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterable
from typing import Any

from ..pod.progress import JobProgress, Progress
from ..pod.protocol import Metric, Result, Resume, parse_line

__all__ = ["decode_results", "progress_from_logs", "results_from_lines"]


def decode_results(record: Result) -> dict[str, Any]:
    """Unpickle a :class:`~jupyter_ktrain.pod.protocol.Result` record's values. Classes the
    notebook defined resolve to the kernel's own (``__main__``), so instances come back as the
    user's types."""
    return {name: pickle.loads(base64.b64decode(data)) for name, data in record.values.items()}


def results_from_lines(lines: Iterable[str]) -> dict[str, Any] | None:
    """The last result record from rank 0 among raw log lines, or None if there is none."""
    found: Result | None = None
    for raw in lines:
        line = parse_line(raw)
        record = line.typed if line.rank == 0 else None
        if isinstance(record, Result):
            found = record
    return decode_results(found) if found is not None else None


def progress_from_logs(lines: Iterable[tuple[str, str]]) -> list[Progress]:
    """Every progress update of a job, replayed from its stored ``(replica, raw line)`` pairs
    through the fold the views use (:class:`~jupyter_ktrain.pod.progress.JobProgress`: the
    lowest reporting rank's records, in order; records without a time are left out)."""
    fold = JobProgress()
    updates: list[tuple[int, Progress]] = []
    for _replica, raw in lines:
        line = parse_line(raw)
        record = line.typed
        if line.rank is None or not isinstance(record, (Metric, Resume)) or record.t is None:
            continue
        progress = fold.feed(line.rank, record, record.t)
        if progress is not None and fold.rank is not None:  # a resume is the job's, any rank
            mine = isinstance(record, Resume)
            updates.append((fold.rank if mine else line.rank, progress))
    # the fold measured the lowest rank anew from its first record: its updates are the job's
    return [progress for rank, progress in updates if rank == fold.rank]
