"""The unit suite starts no processes: a unit test that starts one (a rank, an agent, a
supervisor, a kernel, a console script, ``python -c``) fails, naming the command; such a test
belongs in ``tests/integration``. Seen through Python's audit events, so a process started by
the code under test counts as well as one the test starts.

A library's own probe of the machine (``platform`` running ``uname -p``, matplotlib's
``fc-list``) is not the test's doing and is let through."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
)
LIBRARY_PROBES = frozenset({"uname", "fc-list", "ldconfig", "lscpu"})

_started: list[str] | None = None  # while a unit test runs: the processes it started


def _program(event: str, args: tuple[object, ...]) -> str:
    """What the event starts, as a person would read it (its argv, or the event)."""
    if event == "subprocess.Popen" and len(args) > 1:
        argv = args[1]
        if isinstance(argv, (list, tuple)):
            return " ".join(str(a) for a in argv)[:200]
        return str(argv)[:200]
    if event in ("os.posix_spawn", "os.spawn", "os.system") and len(args) > 1:
        return f"{event} {args[0]!s} {args[1]!s}"[:200]
    return event


def _watch(event: str, args: tuple[object, ...]) -> None:
    if _started is None or event not in PROCESS_EVENTS:
        return
    program = _program(event, args)
    if os.path.basename(program.split(" ", 1)[0]) in LIBRARY_PROBES:
        return
    _started.append(program)


sys.addaudithook(_watch)


@pytest.fixture(autouse=True)
def starts_no_process() -> Iterator[None]:
    global _started
    _started = []
    try:
        yield
    finally:
        started, _started = _started, None
    if started:
        pytest.fail(
            "a unit test starts no process (move it to tests/integration); this one started: "
            + "; ".join(started),
            pytrace=False,
        )
