"""The in-rank entry point: ``python -m jupyter_ktrain.pod.runtime PROGRAM``.

torchrun (or mpirun, or the agent itself for a single process) starts one of these per local
rank: every kind's node command names it (:mod:`.launch`). It wires the rank's two ways to
start: through the node's fork server where there is one (:func:`.agent.forks.run_rank`: the
rank is forked from an interpreter that has torch imported), else here, in this process.
Either way the rank runs :func:`.program.main`, and the process ends without interpreter
teardown (:func:`.program.exit_now`). Nothing imports this module: it is the top of the pod
side.
"""

from __future__ import annotations

import sys

from .agent.forks import run_rank
from .program import exit_now, main

__all__: list[str] = []

if __name__ == "__main__":
    exit_now(run_rank(sys.argv[1:], main))
