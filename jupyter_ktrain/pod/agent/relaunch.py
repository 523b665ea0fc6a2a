"""An MPIJob launcher's ``mpirun``, run again after a fault, never after a bug.

The MPI controller cannot restart a launcher by exit code (its ``ExitCode`` policy becomes the
pod's ``Never``), and ``OnFailure`` re-runs a bug forever. So the launcher's pod is ``Never``
and its agent decides, the way the operator's ExitCode rule does for the other kinds: when
``mpirun`` fails and no rank reported a bug (an ``exit`` record with a code from 1 to 127: each
rank's own agent in its worker pod sorts bug from fault), the failure was a fault (a worker pod
deleted or preempted, a rank killed) and ``mpirun`` runs again, up to ``$KTRAIN_MAX_RESTARTS``
times, once the workers run again (the controller recreates a deleted worker). Every restart is
an ``[agent]:`` line and a ``restart`` record, so the cell and the panel show it.

The launcher's output passes through this process line by line (that is how the ranks' exit
records are seen); nothing is held back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from types import FrameType
from typing import IO

from .. import mpi
from ..exits import NOT_RESTARTED, describe_exit
from ..protocol import Exit, Restart, parse_line

__all__ = ["MAX_RESTARTS_ENV", "forward_signals", "relaunch_mpirun"]

MAX_RESTARTS_ENV = "KTRAIN_MAX_RESTARTS"
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def forward_signals(child: Callable[[], subprocess.Popen[bytes] | None]) -> list[int]:
    """SIGTERM/SIGINT/SIGHUP to this process go on to the current child; returns the list
    the signals received are appended to (a node stopped from outside says so)."""
    received: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        proc = child()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    return received


def bug_in(line: bytes) -> tuple[int, int] | None:
    """(rank, code) when ``line`` is a rank's exit record saying its code raised."""
    parsed = parse_line(line.decode("utf-8", "replace").rstrip("\r\n"))
    rec = parsed.typed
    if not isinstance(rec, Exit) or parsed.rank is None:
        return None
    return (parsed.rank, rec.code) if 0 < rec.code < 128 else None


def _relay(stream: IO[bytes], out: IO[bytes]) -> tuple[int, int] | None:
    """Copy ``stream`` to ``out`` line by line; the first bug seen in it."""
    bug = None
    for line in iter(stream.readline, b""):
        out.write(line)
        out.flush()
        bug = bug or bug_in(line)
    return bug


def _limit(env: dict[str, str]) -> int:
    raw = env.get(MAX_RESTARTS_ENV, "").strip()
    return int(raw) if raw.isdigit() else 0


def relaunch_mpirun(
    cmd: list[str],
    env: dict[str, str],
    say: Callable[[str], None],
    *,
    popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    out: IO[bytes] | None = None,
) -> int:
    """Run ``cmd`` (mpirun) until it succeeds, fails with a bug, or the restarts run out."""
    out = out if out is not None else sys.stdout.buffer
    limit, attempt = _limit(env), 0
    current: list[subprocess.Popen[bytes]] = []
    forward_signals(lambda: current[-1] if current else None)
    while True:  # each attempt asks the cluster afresh where rank 0 runs (a new pod, a new IP)
        run_env = dict(env)
        run_env.update(
            mpi.launcher_env(
                run_env, hostfile=mpi.read_hostfile(run_env), pods=mpi.kubectl_lookup(), say=say
            )
        )
        sys.stdout.flush()
        child = popen(cmd, env=run_env, stdout=subprocess.PIPE)
        current.append(child)
        with child:  # closes the pipe once it is read to the end
            bug = _relay(child.stdout, out) if child.stdout is not None else None
        code = child.wait()
        code = 128 - code if code < 0 else code
        if code == 0:
            say("node command exited with code 0")
            return 0
        if bug is not None:
            say(f"node command exited with code {code}: rank {bug[0]} failed with exit code "
                f"{bug[1]}: {NOT_RESTARTED}")  # fmt: skip
            return code
        if attempt >= limit:
            say(f"node command exited with code {code}: a fault, and no restart is left "
                f"(--max-restarts {limit})")  # fmt: skip
            return code if code >= 128 else 128 + signal.SIGTERM
        attempt += 1
        why = f"mpirun {describe_exit(code)} and no rank reported a bug (a worker lost or killed)"
        say(f"restart {attempt} of at most {limit}: {why}; starting mpirun again")
        say(Restart(attempt, limit, why).format())
