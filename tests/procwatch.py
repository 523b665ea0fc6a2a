"""pytest plugin: the suite fails when a process it started is still alive at the end.

Two nets, because test processes escape their parents on purpose (the local backend's
supervisor forks into its own session; a test cluster's pod processes outlive a killed
kubelet and end up under init):

- every process started by the tests inherits ``KTRAIN_TEST_SESSION=<uid>`` from this
  process's environment, unless it was started with an environment of its own;
- a sampler thread records every descendant of this process (pid and start time) a few times
  a second, so a process that was ours once is known after it was re-parented, whatever its
  environment.

At the end of the session (after every fixture's teardown) the survivors get a few seconds to
exit; whatever is left is listed, killed (so the machine stays clean) and fails the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

MARK_ENV = "KTRAIN_TEST_SESSION"
SAMPLE_S = 0.2
GRACE_S = 10.0


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: int  # clock ticks since boot: tells a pid's reuse apart
    state: str

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def _stat(pid: int) -> Proc | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the command may hold spaces and ')'
    return Proc(pid, int(fields[1]), int(fields[19]), fields[0])


def _all() -> dict[int, Proc]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            proc = _stat(int(entry.name))
            if proc is not None:
                out[proc.pid] = proc
    return out


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]


def _marked(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


class ProcessWatch:
    """Knows every process this session started (see the module docstring)."""

    def __init__(self) -> None:
        self.root = os.getpid()
        self.token = uuid.uuid4().hex
        self.seen: dict[tuple[int, int], str] = {}  # (pid, start) -> command line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="procwatch", daemon=True)

    def start(self) -> None:
        os.environ[MARK_ENV] = self.token
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        procs = _all()
        children: dict[int, list[int]] = {}
        for proc in procs.values():
            children.setdefault(proc.ppid, []).append(proc.pid)
        todo = list(children.get(self.root, ()))
        while todo:
            pid = todo.pop()
            proc = procs[pid]
            if (pid, proc.start) not in self.seen:
                self.seen[(pid, proc.start)] = _cmdline(pid)
            todo.extend(children.get(pid, ()))

    def survivors(self) -> dict[int, str]:
        """Processes of this session still alive: pid -> command line."""
        procs = _all()
        needle = f"{MARK_ENV}={self.token}".encode()
        out: dict[int, str] = {}
        for (pid, start), cmd in list(self.seen.items()):
            proc = procs.get(pid)
            if proc is not None and proc.start == start and proc.alive:
                out[pid] = cmd
        for proc in procs.values():
            fresh = proc.pid != self.root and proc.alive and proc.pid not in out
            if fresh and _marked(proc.pid, needle):
                out[proc.pid] = _cmdline(proc.pid)
        out.pop(self.root, None)
        return out


_watch = ProcessWatch()


def pytest_configure(config: pytest.Config) -> None:
    if Path("/proc/self/stat").exists() and not hasattr(config, "workerinput"):
        _watch.start()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _watch._thread.is_alive():
        return
    _watch.sample()
    _watch.stop()
    deadline = time.monotonic() + GRACE_S
    left = _watch.survivors()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _watch.survivors()
    if not left:
        return
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    lines = "\n".join(f"  pid {pid}: {cmd}" for pid, cmd in sorted(left.items()))
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"{len(left)} process(es) started by the tests were still alive (now killed):\n"
    if reporter is not None:
        reporter.write_line(message + lines, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
