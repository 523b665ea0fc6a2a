"""What a rank leaves behind ends with it: the node's agent adopts its orphans and stops them.

A rank starts processes of its own: DeepSpeed's decoupled checkpoint writer (with the
``multiprocessing`` resource tracker beside it), DataLoader workers, whatever the user's code
starts. In a container they end when the pod does, but a node lives on past one rank: a rank
killed by SIGKILL or the OOM killer leaves its children running, torchrun (which starts each
rank in a session of its own) signals only the ranks still alive when it stops a group, and a
restart starts new ranks beside the old ones' writers, each holding its copy of the model's
state. (Ranks forked by the node's fork server already take their session with them:
:mod:`.forks`; this covers every other way a rank starts.)

So the agent makes itself the reaper of its descendants' orphans (Linux's
``PR_SET_CHILD_SUBREAPER``: a process whose parent died is re-parented to the nearest such
ancestor instead of to init) and stops every process it adopts, as soon as it sees it
(:data:`SWEEP_S`): SIGTERM, then SIGKILL after :data:`GRACE_S`. A resource tracker ignores
SIGTERM; it ends by itself once the processes it served are gone, after removing what they
left (shared memory). Each stop is said in one ``[agent]:`` line. Processes the agent started
itself are never touched: they are registered under the same lock a sweep holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["GRACE_S", "SWEEP_S", "Orphans"]

SWEEP_S = 1.0
GRACE_S = 5.0
_PR_SET_CHILD_SUBREAPER = 36


def _subreaper(on: bool) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (every thread's: an orphan goes to any thread of its reaper)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except (OSError, ValueError):
            return _children_by_scan(pid)  # a kernel without /proc/.../children
    return out


def _children_by_scan(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _stat(int(entry))[1] == pid:
            out.append(int(entry))
    return out


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of ``pid``; ("", 0) when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "", 0
    fields = raw[raw.rindex(")") + 2 :].split()  # the command may hold spaces and ')'
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    return text if len(text) <= 100 else text[:97] + "..."


class Orphans:
    """The agent's adopted processes, stopped as they come (see the module docstring)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.own: set[int] = set()
        self.termed: dict[int, float] = {}  # adopted pid -> when SIGTERM went
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Adopt orphans from now on; False where this system cannot (then nothing runs)."""
        if not _subreaper(True):
            return False
        self._thread = threading.Thread(target=self._run, name="ktrain-orphans", daemon=True)
        self._thread.start()
        return True

    def popen(self, popen: Callable[..., subprocess.Popen[bytes]]) -> Callable[..., Any]:
        """``popen`` whose processes are the agent's own, never taken for orphans."""

        def started(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
            with self.lock:
                proc = popen(*args, **kwargs)
                self.own.add(proc.pid)
                return proc

        return started

    def keep(self, pid: int) -> None:
        with self.lock:
            self.own.add(pid)

    def _run(self) -> None:
        while not self._stop.wait(SWEEP_S):
            self.sweep()

    def sweep(self, grace: float = GRACE_S) -> int:
        """Stop or reap what was adopted; returns how many adopted processes still live."""
        with self.lock:
            adopted = [p for p in _children(os.getpid()) if p not in self.own]
            fresh: list[int] = []
            alive = 0
            now = time.monotonic()
            for pid in adopted:
                state, _ = _stat(pid)
                if state in ("Z", "X", ""):
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)
                    self.termed.pop(pid, None)
                    continue
                alive += 1
                if pid not in self.termed:
                    fresh.append(pid)
                    self._signal(pid, signal.SIGTERM)
                    self.termed[pid] = now
                elif now - self.termed[pid] >= grace:
                    self._signal(pid, signal.SIGKILL)
        if fresh:
            listed = ", ".join(f"pid {p} ({_cmdline(p)})" for p in fresh)
            what = f"{len(fresh)} process(es) left running by a rank that ended"
            self.say(f"stopping {what}: {listed}")
        return alive

    @staticmethod
    def _signal(pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

    def close(self) -> None:
        """At the node's end: stop everything adopted (within :data:`GRACE_S`), reap it."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=SWEEP_S + 1)
        deadline = time.monotonic() + GRACE_S + 1
        while self.sweep(grace=GRACE_S) and time.monotonic() < deadline:
            time.sleep(0.1)
        _subreaper(False)
