"""What a ready interpreter imports before it forks ranks: the fork server's (:mod:`.forks`)
and a warm node's (:mod:`.warm`). Every module imported here is one a forked rank has for free.
Standard library only, like the whole pod package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping

from ..protocol import format_agent_line

__all__ = ["PREIMPORTS", "PREIMPORT_ENV", "preimport"]

PREIMPORT_ENV = "KTRAIN_WARM_PREIMPORT"

# What every rank imports: torch, and sympy, which torch imports on the first optimizer or DDP
# model (with ``torch._dynamo``: 1.9 s on top of torch's 2.2 s here, paid again by a forked rank
# at every restart and every warm run). Not ``torch._dynamo`` itself: with it imported in the
# server, a forked rank's DDP teardown deadlocked once in 3 runs of the quickstart notebook (the
# gloo process group's destructor joins a worker thread that waits for the GIL it holds).
PREIMPORTS = ("torch", "sympy")


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


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()
