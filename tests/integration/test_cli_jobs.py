"""The ``ktrain`` console script on real local jobs, as a shell user follows them: ``ktrain
attach`` prints the job's lines until it ends (a failed job fails the command, naming the
rank), ``ktrain logs`` and ``ktrain status`` read the same job, all worded for a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.notebook_cells import ALLREDUCE_TRAIN, extension_shell

pytestmark = pytest.mark.slow

KTRAIN = str(Path(sys.executable).parent / "ktrain")

SETUP = (
    ALLREDUCE_TRAIN
    + """
def crash_on(bad_rank):
    rank = int(os.environ["RANK"])
    time.sleep(2)
    if rank == bad_rank:
        print("about to fail: the loader found no data", flush=True)
        raise SystemExit(3)
    time.sleep(60)
"""
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    yield from extension_shell(SETUP)


def _ktrain(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script, with this test's job store (``KTRAIN_HOME`` is set per test)."""
    return subprocess.run(
        [KTRAIN, *args], env={**os.environ}, capture_output=True, text=True, timeout=120
    )


def test_attach_follows_a_job_to_its_end_and_logs_and_status_read_it(
    shell: InteractiveShell,
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 1 --procs-per-node 2 --detach", "train(2)\n")
    attached = _ktrain("attach", job.name)
    assert attached.returncode == 0, attached.stderr
    assert "[rank1]: rank 1 of 2 sum 3.0" in attached.stdout
    last = attached.stdout.rstrip().splitlines()[-1]  # the job, as the command ends
    assert last.startswith(f"<ktrain Job {job.name!r} on local: Succeeded"), attached.stdout
    logs = _ktrain("logs", job.name, "--rank", "0")
    assert (logs.returncode, logs.stderr) == (0, "")
    assert "rank 0 of 2 sum 3.0" in logs.stdout
    assert "rank 1 of 2" not in logs.stdout
    status = _ktrain("status", job.name)
    assert status.returncode == 0, status.stderr
    assert f"{job.name} on local: Succeeded" in status.stdout
    assert "%ktrain" not in attached.stdout + logs.stdout + status.stdout


def test_attach_to_a_job_that_fails_fails_the_command_naming_the_rank(
    shell: InteractiveShell,
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 1 --procs-per-node 2 --detach", "crash_on(1)\n")
    attached = _ktrain("attach", job.name)
    assert attached.returncode == 1, attached
    assert "about to fail: the loader found no data" in attached.stdout
    assert attached.stderr.startswith("ktrain: "), attached.stderr
    assert "rank 1" in attached.stderr
    assert "%ktrain" not in attached.stdout + attached.stderr
