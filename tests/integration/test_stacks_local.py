"""``ktrain stacks NAME`` and ``%ktrain stacks NAME`` on real local jobs: every running rank's
Python stack, every thread, within seconds, a frame of the notebook's code named as the job's
tracebacks name it; one rank with ``--rank``; a warm job's current run; bad input (a job that
ended, a rank it does not have, a job that is not there) is one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.backends.local.request import read_plan
from jupyter_ktrain.pod.stacks import STACKS_DIR_ENV
from tests.notebook_cells import STACKS_CELL, STACKS_STALL, STACKS_WAIT_HERE, extension_shell

pytestmark = pytest.mark.slow

KTRAIN = str(Path(sys.executable).parent / "ktrain")

SETUP = STACKS_CELL
WAIT_HERE = STACKS_WAIT_HERE
STALL = STACKS_STALL


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    sh = extension_shell(SETUP)
    yield next(sh)
    for status in LocalBackend().list_jobs():  # nothing outlives its test
        LocalBackend().delete(status.name)
    next(sh, None)


def _ktrain(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script, with this test's job store (``KTRAIN_HOME`` is set per test)."""
    env = {**os.environ}
    env.pop("KUBERNETES_SERVICE_HOST", None)  # not in a pod: the default backend is local
    return subprocess.run([KTRAIN, *args], env=env, capture_output=True, text=True, timeout=60)


def _started(job_name: str, ranks: int) -> None:
    """Every rank printed its first line (it is in ``stall`` or about to be)."""
    backend = LocalBackend()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        text = backend.attach(job_name).logs()
        if all(f"rank {r} up" in text for r in range(ranks)):
            time.sleep(0.5)  # past the print, into the sleep
            return
        time.sleep(0.2)
    raise AssertionError(f"the ranks of {job_name} did not start: {text}")


def test_stacks_of_every_rank_and_of_one_and_the_bad_input_lines(
    shell: InteractiveShell,
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 1 --detach", "stall(1)\n")
    _started(job.name, 2)
    began = time.monotonic()
    every = _ktrain("stacks", job.name)
    took = time.monotonic() - began
    assert (every.returncode, every.stderr) == (0, ""), every
    out = every.stdout
    assert out.startswith(f"Stacks of {job.name!r}, 2 ranks (most recent call last):"), out
    rank0, rank1 = out.split("\nrank 1, pid ")
    assert "\nrank 0, pid " in rank0
    assert "Thread 'MainThread':" in rank0
    assert STALL.search(rank0), rank0  # rank 0 sleeps in stall itself
    assert WAIT_HERE.search(rank1), rank1  # rank 1 inside wait_here, called from stall
    assert rank1.index("in stall") < rank1.index("in wait_here")  # most recent call last
    assert "wait_here" not in rank0
    assert "jupyter_ktrain" not in out  # the runtime's own frames and threads are left out
    assert "%ktrain" not in out
    assert took < 10, took  # the console script's start included
    one = _ktrain("stacks", job.name, "--rank", "1")
    assert one.returncode == 0, one
    assert "1 rank (most recent call last)" in one.stdout
    assert WAIT_HERE.search(one.stdout)
    assert "rank 0" not in one.stdout
    # bad input: one line each, saying what to do
    out_of_range = _ktrain("stacks", job.name, "--rank", "2")
    assert out_of_range.returncode != 0
    assert out_of_range.stderr.strip().splitlines() == [
        f"ktrain: {job.name!r} has ranks 0-1; there is no rank 2. Pass --rank 0 to 1, or leave "
        "--rank out for every rank."
    ]
    unknown = _ktrain("stacks", "no-such-job")
    assert unknown.returncode != 0
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert "No local job named 'no-such-job'" in unknown.stderr
    plan = read_plan(LocalBackend().job_dir(job.name))
    sockets = Path(plan.nodes[0].env[STACKS_DIR_ENV])
    assert sorted(p.name for p in sockets.iterdir()) == ["rank0.sock", "rank1.sock"]
    job.cancel()
    ended = _ktrain("stacks", job.name)
    assert ended.returncode != 0
    assert ended.stderr.strip().splitlines() == [
        f"ktrain: {job.name!r} has ended (Cancelled): it has no stacks to show. "
        f"`ktrain logs {job.name}` shows what it printed."
    ]
    deadline = time.monotonic() + 15  # the job's socket folder goes with it
    while sockets.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not sockets.exists(), sorted(sockets.iterdir())


def test_stacks_through_the_magic(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 1 --detach", "stall(1)\n")
    _started(job.name, 2)
    capsys.readouterr()
    assert shell.run_cell(f"%ktrain stacks {job.name}").success
    out = capsys.readouterr().out
    assert f"Stacks of {job.name!r}, 2 ranks" in out
    assert "\nrank 0, pid " in out
    assert "\nrank 1, pid " in out
    assert WAIT_HERE.search(out), out
    assert STALL.search(out), out
    shell.run_line_magic("ktrain", f"stacks {job.name} --rank 1")
    one = capsys.readouterr().out
    assert WAIT_HERE.search(one)
    assert "rank 0" not in one
    with pytest.raises(UsageError, match=r"has ranks 0-1; there is no rank 5\. Pass --rank 0"):
        shell.run_line_magic("ktrain", f"stacks {job.name} --rank 5")
    with pytest.raises(UsageError, match="No local job named 'nope'"):
        shell.run_line_magic("ktrain", "stacks nope")
    job.cancel()
    with pytest.raises(UsageError, match=rf"'{job.name}' has ended \(Cancelled\): it has no"):
        shell.run_line_magic("ktrain", f"stacks {job.name}")


def test_stacks_of_a_warm_jobs_current_run(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic(
        "ktrain", "--warm --nodes 2 --procs-per-node 1 --detach", "stall(0)\n"
    )
    _started(job.name, 2)
    shell.run_line_magic("ktrain", f"stacks {job.name}")
    out = capsys.readouterr().out
    head, rank1 = out.split("\nrank 1, pid ")
    assert WAIT_HERE.search(head), out  # this run's: rank 0 waits in wait_here
    assert STALL.search(rank1), out
    LocalBackend().cancel_run(job.name, 1)
    with pytest.raises(UsageError, match=rf"The warm job '{job.name}' runs nothing now \(its"):
        shell.run_line_magic("ktrain", f"stacks {job.name}")
