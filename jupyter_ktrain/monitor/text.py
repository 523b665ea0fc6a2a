"""Plain-text view of a running job: for terminals, nbclient and frontends without widgets."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .protocol import LogLine

if TYPE_CHECKING:
    from ..backends.base import Job, JobStatus

__all__ = ["TextSink", "failure_summary"]


class TextSink:
    """Prints every rank's lines with their prefix as they arrive, and state changes."""

    def __init__(self, write: Callable[[str], object] | None = None, show_node_lines: bool = True):
        self.write = write or (lambda text: (sys.stdout.write(text), sys.stdout.flush()))
        self.show_node_lines = show_node_lines
        self._started = time.monotonic()

    def lines(self, replica: str, lines: list[LogLine]) -> None:
        out = []
        for line in lines:
            if line.record is not None:
                continue
            if line.rank is not None:
                out.append(f"[rank{line.rank}]: {line.text}")
            elif self.show_node_lines and line.text.strip():
                out.append(f"[{replica}] {line.text}")
        if out:
            self.write("\n".join(out) + "\n")

    def status(self, status: JobStatus) -> None:
        elapsed = time.monotonic() - self._started
        reason = f" ({status.reason})" if status.reason else ""
        self.write(f"-- {status.name}: {status.state}{reason} after {elapsed:.1f} s\n")


def failure_summary(job: Job, status: JobStatus, tail: int = 20) -> str:
    """The first failing rank, its exit code and its last lines, first."""
    if status.state != "Failed":
        return ""
    if status.reason == "Cancelled":
        return f"Job {job.name!r} was cancelled.\n"
    rank = status.failed_rank
    if rank is None:
        codes = ", ".join(f"{r.name}: {r.exit_code}" for r in status.replicas if r.exit_code)
        return f"Job {job.name!r} failed before any rank reported ({codes or status.reason}).\n"
    code = status.exit_codes.get(rank)
    last = job.logs(rank=rank).splitlines()[-tail:]
    body = "\n".join(f"    {line}" for line in last)
    others = sorted(r for r, c in status.exit_codes.items() if c != 0 and r != rank)
    also = f" Other failed ranks: {others}." if others else ""
    return (
        f"Job {job.name!r} failed: rank {rank} exited first with code {code}.{also}\n"
        f"Last lines of rank {rank}:\n{body}\n"
        f"All logs: %ktrain logs {job.name} [--rank R]\n"
    )
