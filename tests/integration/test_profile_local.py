"""``%ktrain profile NAME --steps N`` and ``ktrain profile`` on real local jobs: a 1x2 gloo job
that trains and reports each step is profiled on both ranks for its next steps; the table names
its real operators and a gloo all-reduce's share, and each rank's Chrome trace is kept in the
job store as valid JSON. Bad input (steps < 1, a rank it does not have, a job that ended, a job
that marks no steps, a warm job with no run going) is one line."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.store.profiles import read_profile, trace_file
from tests.notebook_cells import PROFILE_CELL, STACKS_CELL, extension_shell

pytestmark = pytest.mark.slow

KTRAIN = str(Path(sys.executable).parent / "ktrain")


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    sh = extension_shell(PROFILE_CELL + STACKS_CELL)
    yield next(sh)
    for status in LocalBackend().list_jobs():  # nothing outlives its test
        LocalBackend().delete(status.name)
    next(sh, None)


def _ktrain(*args: str) -> subprocess.CompletedProcess[str]:
    """The console script, with this test's job store (``KTRAIN_HOME`` is set per test)."""
    env = {**os.environ}
    env.pop("KUBERNETES_SERVICE_HOST", None)  # not in a pod: the default backend is local
    return subprocess.run([KTRAIN, *args], env=env, capture_output=True, text=True, timeout=120)


def _started(job_name: str, ranks: int) -> None:
    """Every rank printed its first line."""
    backend = LocalBackend()
    deadline = time.monotonic() + 90
    text = ""
    while time.monotonic() < deadline:
        text = backend.attach(job_name).logs()
        if all(f"rank {r} up" in text for r in range(ranks)):
            return
        time.sleep(0.2)
    raise AssertionError(f"the ranks of {job_name} did not start: {text}")


def _row(text: str, rank: int) -> list[str]:
    """Rank ``rank``'s line of the table: rank, steps, window, compute, communication, waiting."""
    m = re.search(rf"^  rank {rank} +(.+)$", text, re.M)
    assert m, text
    return [f"rank {rank}", *m.group(1).split()]


def test_profile_of_a_running_job_in_the_cell_and_the_console_script(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic(
        "ktrain", "--nodes 1 --procs-per-node 2 --detach", "train_steps(100_000, 0.05)\n"
    )
    _started(job.name, 2)
    capsys.readouterr()
    began = time.monotonic()
    assert shell.run_cell(f"%ktrain profile {job.name} --steps 3").success
    took = time.monotonic() - began
    out = capsys.readouterr().out
    assert out.startswith(f"Profile of {job.name!r}: 2 ranks, 3 steps each (CPU time):"), out
    for rank in (0, 1):
        _, steps, *_ = _row(out, rank)
        first, last = map(int, steps.split("-"))
        assert last - first == 2, out  # three steps, as the job numbered them
        head = f"\nrank {rank}: top CPU operators, self time\n"
        assert head in out, out
        ops = out.split(head)[1].split("\n\n")[0]
        assert re.search(r"^  aten::(addmm|mm) ", ops, re.M), ops  # the model's matmuls
        assert re.search(r"^  gloo:all_reduce +\d+ ", ops, re.M), ops
    assert took < 60, took
    logs = job.logs()
    assert "profiler_start" not in logs  # Kineto's own lines stay out of the job's output
    assert "gpuGetDeviceCount" not in logs
    kept = read_profile("local", job.name)
    assert kept is not None
    assert (kept["steps"], kept["text"]) == (3, out.rstrip("\n"))
    assert kept["traces"] == [0, 1]
    for figures in kept["ranks"]:
        window = figures["window"]
        assert figures["communication"] > 0, figures  # the gloo all-reduce's share
        assert figures["compute"] > 0, figures
        parts = figures["compute"] + figures["communication"] + figures["waiting"]
        assert abs(parts - window) < 1e-3 * window + 1e-5, figures
        assert "trace" not in figures
        path = trace_file("local", job.name, figures["rank"])
        assert path is not None, figures
        trace = json.loads(gzip.decompress(path.read_bytes()))
        names = {e.get("name") for e in trace["traceEvents"]}
        assert {"gloo:all_reduce", "aten::addmm"} <= names
        assert path.stat().st_mode & 0o777 == 0o600
    # the console script, one rank
    one = _ktrain("profile", job.name, "--steps", "2", "--rank", "1")
    assert (one.returncode, one.stderr) == (0, ""), one
    assert one.stdout.startswith(f"Profile of {job.name!r}: 1 rank, 2 steps each"), one.stdout
    assert "\nrank 1: top CPU operators" in one.stdout
    assert "rank 0" not in one.stdout
    assert read_profile("local", job.name)["traces"] == [1]  # type: ignore[index]
    assert trace_file("local", job.name, 0) is None  # the last profile replaced the one before
    # bad input: one line each, before anything is asked
    for args, said in [
        (["--steps", "0"], "--steps '0' is not a number of steps (1 or more): use e.g. --steps 3."),
        (
            ["--steps", "3", "--rank", "2"],
            f"{job.name!r} has ranks 0-1; there is no rank 2. Pass --rank 0 to 1, or leave "
            "--rank out for every rank.",
        ),
    ]:
        bad = _ktrain("profile", job.name, *args)
        assert bad.returncode != 0
        assert bad.stderr.strip().splitlines() == [f"ktrain: {said}"], bad
    with pytest.raises(UsageError, match=r"--steps '-1' is not a number of steps"):
        shell.run_line_magic("ktrain", f"profile {job.name} --steps -1")
    job.cancel()
    ended = _ktrain("profile", job.name, "--steps", "3")
    assert ended.returncode != 0
    assert ended.stderr.strip().splitlines() == [
        f"ktrain: {job.name!r} has ended (Cancelled): it has no steps to profile. "
        f"`ktrain logs {job.name}` shows what it printed."
    ]


def test_profile_of_a_job_that_marks_no_steps_and_of_a_warm_job_between_runs(
    shell: InteractiveShell,
) -> None:
    job = shell.run_cell_magic(
        "ktrain", "--warm --nodes 1 --procs-per-node 2 --detach", "stall(0)\n"
    )
    _started(job.name, 2)
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("ktrain", f"profile {job.name} --steps 3")
    assert str(raised.value).splitlines() == [
        f"ktrain: {job.name!r} marks no steps, so a profile has no step to start at: call "
        "`ktrain.report(step=...)` once per step in the training loop on every rank (a Hugging "
        f"Face Trainer marks its steps itself), then run `%ktrain profile {job.name}` again."
    ]
    assert read_profile("local", job.name) is None  # nothing was kept
    LocalBackend().cancel_run(job.name, 1)
    with pytest.raises(
        UsageError, match=rf"^ktrain: The warm job '{job.name}' runs nothing now \(its "
    ):
        shell.run_line_magic("ktrain", f"profile {job.name} --steps 3")
