"""Spare CPU on this machine: what tracking waits for while a job that runs here keeps it busy.

A tracking server's work is per point (MLflow's takes about 0.1 ms of CPU for each point it
stores), and the kernel's sending costs CPU too. When the job's ranks run on this machine and
keep its cores busy, every request is taken from them: a job that reports three values a step
at 2,000 steps a second on two cores ran a third slower with tracking on. So the sender asks
:class:`SpareCpu` before each request and holds its points while less than
:data:`SPARE_CORES` of a core was idle since it last asked (:mod:`.mlflow_run` says how long
it may hold them).

Idle is read two ways, and the smaller wins: the machine's (``/proc/stat``: idle and iowait
time of all its CPUs) and, in a container given a CPU quota (cgroup v2 ``cpu.max``), the
quota less what the container used (``cpu.stat`` ``usage_usec``). A machine where neither
can be read has spare CPU as far as this module knows.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SPARE_CORES", "Sample", "SpareCpu", "spare_cores"]

SPARE_CORES = 0.5  # send while at least this much of a core was idle
_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/stat counts in these


@dataclass(frozen=True)
class Sample:
    """CPU counters at one moment, in seconds: ``idle`` CPU time of the machine (None when
    unknown), CPU time the container ``used`` and its ``quota`` in cores (None without one)."""

    wall: float
    idle: float | None
    used: float | None = None
    quota: float | None = None


def spare_cores(before: Sample, after: Sample) -> float:
    """How many cores were idle, on average, between two samples (``inf`` when unknown)."""
    wall = after.wall - before.wall
    if wall <= 0:
        return float("inf")
    spare = float("inf")
    if before.idle is not None and after.idle is not None:
        spare = (after.idle - before.idle) / wall
    if after.quota is not None and before.used is not None and after.used is not None:
        spare = min(spare, after.quota - (after.used - before.used) / wall)
    return max(spare, 0.0)


class SpareCpu:
    """Cores idle since the last call of :meth:`spare` (the first call: since this was made)."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self._last = self.sample()

    def spare(self) -> float:
        now = self.sample()
        spare, self._last = spare_cores(self._last, now), now
        return spare

    def sample(self) -> Sample:
        return Sample(time.monotonic(), self._idle(), *self._cgroup())

    def _idle(self) -> float | None:
        try:
            with open(self.root / "proc/stat") as f:
                fields = f.readline().split()
        except OSError:
            return None
        if len(fields) < 6 or fields[0] != "cpu":
            return None
        return (int(fields[4]) + int(fields[5])) / _TICKS  # idle + iowait

    def _cgroup(self) -> tuple[float | None, float | None]:
        cgroup = self.root / "sys/fs/cgroup"
        try:
            limit = (cgroup / "cpu.max").read_text().split()
            if not limit or limit[0] == "max":
                return None, None
            quota = int(limit[0]) / int(limit[1])
            for line in (cgroup / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6, quota
        except (OSError, ValueError, IndexError, ZeroDivisionError):
            pass
        return None, None
