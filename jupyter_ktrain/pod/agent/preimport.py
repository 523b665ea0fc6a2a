"""What a ready interpreter imports before it forks ranks: the fork server's (:mod:`.forks`)
and a warm node's (:mod:`.warm`). Every module imported here is one a forked rank has for free.
Standard library only, like the whole pod package.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Mapping

from ..protocol import format_agent_line

__all__ = ["PREIMPORTS", "PREIMPORT_ENV", "preimport", "preimport_when_idle"]

PREIMPORT_ENV = "KTRAIN_WARM_PREIMPORT"

# What every rank imports: torch, and ``torch._dynamo`` (with sympy), which torch imports on the
# first optimizer or DDP model: 0.9 s on top of torch's 1.2 s here, that a forked rank would
# pay again at every restart and every warm run. (With it imported ahead, a rank's DDP teardown
# deadlocked in 1 of 4 warm runs: PyTorch's process-group destructor and gloo's worker thread
# wait for each other over the GIL. The rank's runtime keeps destroyed groups alive so that
# destructor never runs in the program: :mod:`..integrations`.)
PREIMPORTS = ("torch", "torch._dynamo")


def preimport(env: Mapping[str, str]) -> list[str]:
    """Import :data:`PREIMPORTS` and ``$KTRAIN_WARM_PREIMPORT`` into this process (what every
    rank then has for free); the names imported. A module that is not there is skipped."""
    extra = (n.strip() for n in env.get(PREIMPORT_ENV, "").split(",") if n.strip())
    names = [*PREIMPORTS, *extra]
    done = []
    for name in dict.fromkeys(names):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        except Exception as exc:  # a module that fails to import fails in the ranks too
            _say(f"warning: pre-importing {name} failed ({type(exc).__name__}: {exc})")
            continue
        done.append(name)
    return done


def preimport_when_idle(env: Mapping[str, str]) -> list[str]:
    """:func:`preimport` on a CPU nobody else wants: in a thread of its own under
    ``SCHED_IDLE`` (Linux), joined before this returns, so the imports never slow the job's
    own processes (a fork server warms while the job's first ranks import torch and train) and
    the caller's thread, which forks the ranks, keeps its own policy. Where the policy cannot
    be set, the imports run as :func:`preimport` would."""
    done: list[str] = []

    def run() -> None:
        with contextlib.suppress(AttributeError, OSError):  # this thread only
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        done.extend(preimport(env))

    worker = threading.Thread(target=run, name="ktrain-preimport")
    worker.start()
    worker.join()
    return done


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()
