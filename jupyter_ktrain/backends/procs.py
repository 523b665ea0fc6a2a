"""Find and stop every process of a local job, wherever it went (own sessions included).

Each local job's processes carry ``KTRAIN_JOB_UID=<uid>`` in their environment, inherited by
torchrun's workers and anything they start, so a sweep of ``/proc`` finds them even after
torchrun put its workers in sessions of their own.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection
from pathlib import Path

__all__ = ["MARKER_ENV", "kill_marked", "marked_pids", "process_start", "stop_marked"]

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


def stop_marked(
    marker: str, exclude: Collection[int] = (), grace: float = 3.0, timeout: float = 10.0
) -> list[int]:
    """Stop every process of the job: SIGTERM (torchrun then stops its workers its own way),
    SIGKILL whatever is left after ``grace`` seconds. Returns the processes still there after
    ``timeout`` seconds: normally none."""
    kill_marked(marker, exclude, signal.SIGTERM)
    start = time.monotonic()
    while True:
        left = [pid for pid in marked_pids(marker) if pid not in exclude]
        waited = time.monotonic() - start
        if not left or waited > timeout:
            return left
        if waited > grace:  # also what a process started meanwhile (a worker's child)
            kill_marked(marker, exclude)
        time.sleep(0.05)


def process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None when there is no such process:
    tells a live process from a later one that reused its pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the command may hold spaces and ')'
    if fields[0] in ("Z", "X"):
        return None  # a zombie: it ended, nobody has reaped it yet
    return int(fields[19])
