"""Warm jobs: the shape that decides reuse, what a difference says, the refusals, the idle
wording, and the warm agent's run loop on real forked processes (no torch needed).

The tests of tests/unit/test_warm.py that start processes (a unit test starts none)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from jupyter_ktrain.pod.protocol import RUN_END, parse_line, record_type
from tests.unit.test_warm import _order


def test_the_warm_agent_runs_run_after_run_and_a_failure_leaves_it_ready(tmp_path: Path) -> None:
    """A real agent: run 1 fails on local rank 1 while rank 0 sleeps (stopped after the grace),
    run 2 succeeds on the same agent; each run framed by its records."""
    env = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0",
           "KTRAIN_WARM_CONTROL": str(tmp_path), "KTRAIN_WARM_PREIMPORT": "json",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # fmt: skip
    _order(tmp_path, 1, "import os, time\nif os.environ['RANK'] == '1': raise SystemExit(5)\n"
           "time.sleep(60)\n")  # fmt: skip
    agent = subprocess.Popen(
        [sys.executable, "-m", "jupyter_ktrain.pod.agent.warm"],
        env={**env, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert agent.stdout is not None
    ends = []
    try:
        for line in agent.stdout:
            parsed = parse_line(line.rstrip("\n"))
            if record_type(parsed.record) == RUN_END:
                ends.append(parsed.record)
                if len(ends) == 1:
                    started = time.monotonic()
                    _order(tmp_path, 2, "print('second run', flush=True)\n")
                else:
                    break
    finally:
        agent.terminate()
        agent.wait(10)
        agent.stdout.close()
    first, second = ends
    assert (first["run"], first["code"], first["ranks"]) == (1, 5, {"0": 143, "1": 5})
    assert (second["run"], second["code"], second["ranks"]) == (2, 0, {"0": 0, "1": 0})
    assert time.monotonic() - started < 5
    assert agent.returncode == 143  # stopped by SIGTERM between runs, and says so by its code
