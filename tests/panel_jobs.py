"""Real tiny local jobs for the side panel's tests, started the way a user starts them: the
``%%ktrain`` magic in a real IPython shell (text monitor), on a given job registry."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.base import Job
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.capture import capture
from jupyter_ktrain.spec.job import JobSpec

TRAIN = """
import os, time
import jupyter_ktrain as ktrain

def train(steps, pause):
    rank = int(os.environ["RANK"])
    for step in range(1, steps + 1):
        ktrain.report(step=step, total=steps, loss=1.0 / step + rank)
        print(f"rank {rank} step {step} hello", flush=True)
        time.sleep(pause)
    return rank
"""


def start_job(
    home: Path, name: str, *, nodes: int = 2, steps: int = 600, pause: float = 0.1
) -> Job:
    """Start the same job without following it (for cancel tests); returns its handle."""
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    assert shell.run_cell(TRAIN, store_history=True).success
    program = capture(f"r = train({steps}, {pause})\n", shell.user_ns, shell.user_ns["In"],
                      getattr(shell, "user_ns_hidden", {}))  # fmt: skip
    shell.reset(new_session=True)
    spec = JobSpec.create(name=name, nodes=nodes, procs_per_node=1)
    root = str(Path(__file__).resolve().parents[1])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        return LocalBackend(home).submit(spec, program)


def run_job(home: Path, name: str, *, nodes: int = 2, steps: int = 5, pause: float = 0.0) -> None:
    """Run ``train(steps, pause)`` as ``nodes`` x 1 local job named ``name`` to its end."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KTRAIN_HOME", str(home))
        mp.setenv("KTRAIN_MONITOR", "text")
        root = str(Path(__file__).resolve().parents[1])
        mp.setenv("PYTHONPATH", os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
        shell = InteractiveShell.instance()
        shell.reset(new_session=True)
        shell.extension_manager.load_extension("jupyter_ktrain")
        assert shell.run_cell(TRAIN, store_history=True).success
        job = shell.run_cell_magic(
            "ktrain", f"--nodes {nodes} --procs-per-node 1 --name {name}",
            f"r = train({steps}, {pause})\n",
        )  # fmt: skip
        shell.reset(new_session=True)
    assert job is not None
    assert job.state == "Succeeded", job.logs()
