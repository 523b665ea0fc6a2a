"""Find and stop every process of a local job, or of one of its nodes, wherever it went (own
sessions included).

Each local job's processes carry ``KTRAIN_JOB_UID=<uid>`` in their environment, inherited by
torchrun's workers and anything they start, so a sweep of ``/proc`` finds them even after
torchrun put its workers in sessions of their own. Each node's processes also carry
``KTRAIN_NODE_UID=<uid>-node-<k>``: what a container's cgroup is on a cluster, the set that dies
with the node (:func:`kill_node`). A process group or a session cannot be that set here:
torchrun starts each worker in a session of its own. And what a node process is started with so
that it dies with its supervisor (:func:`die_with`), and its exit code as a pod's
(:func:`exit_code`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from ...failures import ranks_text

__all__ = [
    "MARKER_ENV",
    "NODE_ENV",
    "NodeKill",
    "die_with",
    "exit_code",
    "kill_marked",
    "kill_node",
    "marked_pids",
    "node_marker",
    "node_pids",
    "process_start",
    "stop_marked",
]

MARKER_ENV = "KTRAIN_JOB_UID"
NODE_ENV = "KTRAIN_NODE_UID"
NODE_KILL_WAIT_S = 2.0
_PR_SET_PDEATHSIG = 1


def node_marker(marker: str, node: int) -> str:
    """The value of ``KTRAIN_NODE_UID`` that node ``node`` of the job ``marker`` carries."""
    return f"{marker}-node-{node}"


def _environs(name: str, value: str) -> dict[int, list[bytes]]:
    """pid -> environment of the processes whose environment holds ``name=value``."""
    needle = f"{name}={value}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in environ:
            found[int(entry.name)] = environ
    return found


def marked_pids(marker: str) -> list[int]:
    """PIDs whose environment holds ``KTRAIN_JOB_UID=marker`` (Linux ``/proc``)."""
    return list(_environs(MARKER_ENV, marker))


def node_pids(marker: str, node: int) -> list[int]:
    """PIDs whose environment holds node ``node``'s ``KTRAIN_NODE_UID`` (Linux ``/proc``)."""
    return list(_environs(NODE_ENV, node_marker(marker, node)))


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


@dataclass(frozen=True)
class NodeKill:
    """What :func:`kill_node` found of a node: how many processes it killed, the ranks among
    them (torchrun's ``RANK``), and the pids still there after its wait (normally none)."""

    killed: int = 0
    ranks: tuple[int, ...] = ()
    left: tuple[int, ...] = ()

    def describe(self) -> str:
        """``its 3 remaining processes (ranks 2 and 3 among them) were killed with it (SIGKILL),
        as a container's are``; "" when it had none left."""
        if not self.killed:
            return ""
        many = self.killed != 1
        what = f"its {self.killed} remaining process{'es' if many else ''}"
        if self.ranks:
            what += f" ({ranks_text(self.ranks)}{' among them' if many else ''})"
        return f"{what} {'were' if many else 'was'} killed with it (SIGKILL), as a container's are"

    def ranks_killed(self) -> str:
        """``its ranks 2 and 3 were killed with it`` when the node died with ranks still
        running; "" when none."""
        if not self.ranks:
            return ""
        verb = "was" if len(self.ranks) == 1 else "were"
        return f"its {ranks_text(self.ranks)} {verb} killed with it"


def _rank(environ: list[bytes]) -> int | None:
    """The rank of a process torchrun started (its workers carry ``LOCAL_RANK`` and ``RANK``;
    torchrun itself carries neither), else None."""
    if not any(e.startswith(b"LOCAL_RANK=") for e in environ):
        return None
    raw = next((e[5:] for e in environ if e.startswith(b"RANK=")), b"")
    return int(raw) if raw.isdigit() else None


def kill_node(marker: str, node: int, wait: float = NODE_KILL_WAIT_S) -> NodeKill:
    """SIGKILL every process left of node ``node`` of the job ``marker``, again until none is
    left or ``wait`` seconds passed: what a container runtime does to a container's processes
    when its first process ends."""
    value = node_marker(marker, node)
    found = _environs(NODE_ENV, value)
    ranks = sorted(r for r in map(_rank, found.values()) if r is not None)
    killed: set[int] = set()
    deadline = time.monotonic() + wait
    left = found
    while left:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        if time.monotonic() > deadline:
            break
        time.sleep(0.01)
        left = _environs(NODE_ENV, value)  # a zombie has no environment left: it is gone
    return NodeKill(len(killed), tuple(ranks), tuple(sorted(left)))


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


def exit_code(returncode: int | None) -> int | None:
    """A process's exit code as a pod's would be: 128 + N for one killed by signal N."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM from the kernel when ``parent`` dies (a node's
    agent forwards it to torchrun, which stops its workers), so no node outlives a killed
    supervisor even for the moment before the watchdog sweeps."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork, called after

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec
