"""The per-replica runner: starts the node's command (torchrun), forwards signals, returns
its exit code. Everything it prints itself goes out as ``[agent]: `` lines."""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType

from ..monitor.protocol import format_agent_line

__all__ = ["main"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    """Run ``argv`` after ``--``; exit with its code (128+signal when it was killed)."""
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.stderr.write("usage: python -m jupyter_ktrain.agent [options] -- CMD [ARGS...]\n")
        return 2
    cmd = argv[argv.index("--") + 1 :]
    child = subprocess.Popen(cmd)

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    code = child.wait()
    if code < 0:
        code = 128 - code
    _say(f"node command exited with code {code}")
    return code
