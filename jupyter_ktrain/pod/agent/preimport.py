"""What a ready interpreter imports before it forks ranks: the fork server's (:mod:`.forks`)
and a warm node's (:mod:`.warm`). Every module imported here is one a forked rank has for free.
Standard library only, like the whole pod package.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, Sequence

from ..protocol import format_agent_line

__all__ = ["PREIMPORTS", "PREIMPORT_ENV", "preimport"]

PREIMPORT_ENV = "KTRAIN_WARM_PREIMPORT"

# What every rank imports: torch, and ``torch._dynamo`` (with sympy), which torch imports on the
# first optimizer or DDP model: 0.9 s on top of torch's 1.2 s here, that a forked rank would
# pay again at every restart and every warm run. (With it imported ahead, a rank's DDP teardown
# deadlocked in 1 of 4 warm runs: PyTorch's process-group destructor and gloo's worker thread
# wait for each other over the GIL. The rank's runtime keeps destroyed groups alive so that
# destructor never runs in the program: :mod:`..integrations`.)
PREIMPORTS = ("torch", "torch._dynamo")


def preimport(env: Mapping[str, str], only: Sequence[str] = ()) -> list[str]:
    """Import :data:`PREIMPORTS` and ``$KTRAIN_WARM_PREIMPORT`` into this process (what every
    rank then has for free), or ``only`` those named; the names imported. A module that is not
    there is skipped."""
    extra = (n.strip() for n in env.get(PREIMPORT_ENV, "").split(",") if n.strip())
    names = list(only) or [*PREIMPORTS, *extra]
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
