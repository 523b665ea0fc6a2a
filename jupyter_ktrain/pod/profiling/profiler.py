"""A rank's profile of its next steps, on demand (``ktrain profile NAME --steps N``).

The rank's stacks thread (:mod:`.stacks`) gets the request and calls :func:`take`, which arms
``torch.profiler`` on the rank's step boundaries (:mod:`.steps`: what the job already
reports): the profiler starts at the next boundary and stops N boundaries later, both on the
thread that marks the steps (the training loop), so it covers exactly those N steps. Then
:func:`take` exports the Chrome trace, reads its figures (:mod:`.profile_summary`) and answers
one :class:`~.protocol.Profile` record with the trace gzipped (left out, with a note, over
:data:`MAX_TRACE_BYTES`).

A rank that marked no step yet waits :data:`NO_STEP_WAIT_S` for one, then answers that it marks
none (``no_steps``); a program that has not imported torch, a profile already being taken, N
steps that do not end within :data:`STEPS_TIMEOUT_S`: a record saying why. Standard library
only: torch is the program's (``torch.profiler`` is loaded only when a profile is asked of a
program that imported torch).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import importlib
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..protocol import Profile
from . import steps as step_marks
from .summary import summarize

__all__ = ["MAX_RAW_BYTES", "MAX_TRACE_BYTES", "NO_STEP_WAIT_S", "STEPS_TIMEOUT_S", "take"]

NO_STEP_WAIT_S = 10.0  # how long a rank that marked no step yet waits for one
STEPS_TIMEOUT_S = 300.0  # the N steps must end within this, from the request
MAX_TRACE_BYTES = 8 << 20  # a trace kept: gzipped, at most this (it travels in the record)
MAX_RAW_BYTES = 256 << 20  # a trace over this is neither read nor kept
_LOOK_S = 0.05
KINETO_LOG_LEVEL = "KINETO_LOG_LEVEL"
_busy = threading.Lock()


@dataclass
class _Armed:
    """A profile waiting for its steps: started at ``first``, stopped at ``last``."""

    steps: int
    profiler: Any = None
    first: int | None = None
    last: int | None = None
    seen: int = 0
    error: str = ""
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)

    def boundary(self, step: int) -> bool:
        """A step boundary (on the training thread): start, count, stop; True when done."""
        with self.lock:
            if self.cancelled:
                return True
            try:
                if self.profiler is None:
                    self.profiler = _profiler()
                    self.profiler.start()
                    self.first = step
                    return False
                self.seen += 1
                if self.seen < self.steps:
                    return False
                self.profiler.stop()
                self.last = step
            except Exception as exc:  # the profiler's failure is the answer, never training's
                self.error = f"the profiler failed ({exc!r})"
            self.done.set()
            return True


def _profiler() -> Any:
    """A profiler of CPU operators, and of CUDA kernels where the rank has a GPU (torch is the
    program's: :func:`take` asks only of a program that imported it)."""
    torch = sys.modules["torch"]
    # Kineto's own log lines (profiler_start/stop, a CPU machine's "gpuGetDeviceCount failed")
    # would land in the job's output as the rank's: off, unless the job chose a level
    os.environ.setdefault(KINETO_LOG_LEVEL, "6")
    profiling: Any = importlib.import_module("torch.profiler")
    activities = [profiling.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(profiling.ProfilerActivity.CUDA)
    return profiling.profile(activities=activities)


def take(
    rank: int | None,
    steps: int,
    wait_s: float = NO_STEP_WAIT_S,
    timeout_s: float = STEPS_TIMEOUT_S,
) -> Profile:
    """This rank's profile of its next ``steps`` steps (see the module's docstring)."""
    pid = os.getpid()
    if not _busy.acquire(blocking=False):
        return Profile(rank, pid, why="a profile of this rank is being taken already")
    try:
        return _take(rank, pid, steps, wait_s, timeout_s)
    finally:
        _busy.release()


def _take(rank: int | None, pid: int, steps: int, wait_s: float, timeout_s: float) -> Profile:
    began = time.monotonic()
    while step_marks.last() is None and time.monotonic() - began < wait_s:
        time.sleep(_LOOK_S)
    if step_marks.last() is None:
        return Profile(rank, pid, why=f"it marked no step (none in {wait_s:.0f} s)", no_steps=True)
    if "torch" not in sys.modules:
        return Profile(rank, pid, why="its program has not imported torch: nothing to profile")
    armed = _Armed(steps)
    step_marks.on_boundary(armed.boundary)
    if not armed.done.wait(max(timeout_s - (time.monotonic() - began), 0.0)):
        with armed.lock:
            armed.cancelled = True
            if armed.profiler is not None:
                with contextlib.suppress(Exception):
                    armed.profiler.stop()
        at = f" (it was at step {step_marks.last()})"
        return Profile(rank, pid, why=f"{steps} steps did not end within {timeout_s:.0f} s{at}")
    if armed.error:
        return Profile(rank, pid, armed.first, armed.last, why=armed.error)
    return _answer(rank, pid, armed)


def _answer(rank: int | None, pid: int, armed: _Armed) -> Profile:
    """The stopped profiler's trace, read and kept: the record."""
    with tempfile.TemporaryDirectory(prefix="ktrain-profile-") as folder:
        path = os.path.join(folder, "trace.json")
        try:
            armed.profiler.export_chrome_trace(path)
            size = os.path.getsize(path)
            if size > MAX_RAW_BYTES:
                over = f"{size >> 20} MiB, over {MAX_RAW_BYTES >> 20}"
                why = f"its trace is {over}: profile fewer steps"
                return Profile(rank, pid, armed.first, armed.last, why=why)
            with open(path, "rb") as f:
                raw = f.read()
            summary = summarize(json.loads(raw))
        except Exception as exc:
            why = f"its trace could not be read ({exc!r})"
            return Profile(rank, pid, armed.first, armed.last, why=why)
    packed = gzip.compress(raw, compresslevel=6)
    trace, note = base64.b64encode(packed).decode(), ""
    if len(packed) > MAX_TRACE_BYTES:
        trace = ""
        note = (
            f"trace not kept: {len(packed) / 2**20:.1f} MiB gzipped, over "
            f"{MAX_TRACE_BYTES / 2**20:.0f} MiB (profile fewer steps)"
        )
    return Profile(
        rank, pid, armed.first, armed.last, summary.device, summary.window, summary.compute,
        summary.communication, summary.waiting, summary.ops, trace, note,
    )  # fmt: skip
