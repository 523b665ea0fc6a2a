"""Find and stop every process of a local job, wherever it went (own sessions included).

Each local job's processes carry ``KTRAIN_JOB_UID=<uid>`` in their environment, inherited by
torchrun's workers and anything they start, so a sweep of ``/proc`` finds them even after
torchrun put its workers in sessions of their own.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection
from pathlib import Path

__all__ = ["MARKER_ENV", "kill_marked", "marked_pids"]

MARKER_ENV = "KTRAIN_JOB_UID"


def marked_pids(marker: str) -> list[int]:
    """PIDs whose environment holds ``KTRAIN_JOB_UID=marker`` (Linux ``/proc``)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_marked(marker: str, exclude: Collection[int] = (), sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to every process of the job; returns how many were signalled."""
    count = 0
    for pid in marked_pids(marker):
        if pid in exclude:
            continue
        try:
            os.kill(pid, sig)
            count += 1
        except ProcessLookupError:
            pass
    return count
