"""A local sweep run by ``ktrain.sweep`` in a plain Python process, seen from this test's
shell through its record in the job store: the process killed (``kill -9``) mid-sweep, then
``%ktrain attach SWEEP`` (Interrupted, the ended trials, the running one named), ``%ktrain
list`` and ``%ktrain delete SWEEP``; and the process interrupted (SIGINT, as Ctrl-C) while two
trials run: every trial cancelled, the warm jobs ended, the record Interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.store.sweeps import SweepRecord, TrialRow, read_sweep
from jupyter_ktrain.sweep.record import seen_state
from jupyter_ktrain.sweep.trials import Sweep
from tests.notebook_cells import extension_shell

pytestmark = pytest.mark.slow

SCRIPT = """
import sys, time
import jupyter_ktrain as ktrain

def train(x):
    # x=1 and x=2 end after 4 steps; x=3 and x=4 report for a minute
    steps = 600 if x >= 3 else 4
    for step in range(steps):
        ktrain.report(step=step, loss=float(x) + 1.0 / (step + 1))
        time.sleep(0.1)
    return x

if __name__ == "__main__":
    ktrain.sweep(
        train, {"x": f"choice({sys.argv[2]})"}, objective="loss:min", parallel=2,
        no_prune=True, warm=True, nodes=1, procs_per_node=1, name=sys.argv[1],
    )
"""


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    sh = extension_shell("")
    yield next(sh)
    for status in LocalBackend().list_jobs():  # no node outlives its test
        LocalBackend().delete(status.name)
    next(sh, None)


def _start(tmp_path: Path, name: str, values: str) -> subprocess.Popen[str]:
    script = tmp_path / "sweep_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    return subprocess.Popen(
        [sys.executable, str(script), name, values],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "KTRAIN_MONITOR": "text"},
        cwd=tmp_path,
    )


def _wait_record(
    proc: subprocess.Popen[str], name: str, check: Callable[[Sequence[TrialRow]], bool]
) -> SweepRecord:
    """The sweep's record once ``check(rows)`` holds (what the sweep itself wrote: it holds
    under load as well, however slowly the trials start)."""
    deadline = time.monotonic() + 180
    while True:
        record = read_sweep(name)
        if record is not None and check(record.rows):
            return record
        if proc.poll() is not None:
            raise AssertionError(
                f"the sweep ended first: {proc.stdout.read() if proc.stdout else ''}"
            )
        assert time.monotonic() < deadline, f"not within 180 s: {record}"
        time.sleep(0.1)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_attach_after_the_sweeps_process_was_killed_shows_it_interrupted(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc = _start(tmp_path, "ka", "1,2,3")

    def two_ended_one_reporting(rows: Sequence[TrialRow]) -> bool:
        ended = [r for r in rows if r.state == "Succeeded"]
        running = [r for r in rows if r.state == "Running" and r.objective is not None]
        return len(ended) == 2 and len(running) == 1

    record = _wait_record(proc, "ka", two_ended_one_reporting)
    proc.kill()  # kill -9: the kernel gone mid-sweep, nothing written after
    proc.communicate(timeout=30)
    running = next(r for r in record.rows if r.state == "Running")
    assert running.params == {"x": 3}
    capsys.readouterr()

    sweep = shell.run_line_magic("ktrain", "attach ka")
    out = _plain(capsys.readouterr().out)
    assert isinstance(sweep, Sweep)
    assert "Sweep 'ka' (local): Interrupted: 2 of 3 trial(s) ended; the process that ran it " \
        "is gone" in out, out  # fmt: skip
    by_x = {t.params["x"]: t for t in sweep.trials}
    for x in (1, 2):  # the ended trials with their objectives, as the sweep recorded them
        assert (by_x[x].state, by_x[x].objective) == ("Succeeded", pytest.approx(x + 0.25))
        assert by_x[x].handle is not None
        assert by_x[x].handle.result == x  # its job still there: its run's value
    trial = by_x[3]
    assert trial.state == "Running"
    assert trial.handle is not None
    assert trial.run is not None
    assert not trial.handle.status().terminal  # the trial's run goes on without the sweep
    assert (
        f"Trial {trial.number} still runs on '{trial.job}' run {trial.run}: follow it with "
        f"`%ktrain attach {trial.job}`, cancel it with `%ktrain cancel {trial.job} --run "
        f"{trial.run}`." in out
    ), out
    assert "Its warm job(s) ka-w0, ka-w1 still hold their nodes" in out, out
    assert "best: trial" in out, out
    assert "loss=1.25 (x=1)" in out, out

    assert shell.run_line_magic("ktrain", "list") is None
    out = _plain(capsys.readouterr().out)
    assert re.search(r"^ka +local +sweep Interrupted · 2/3 trial\(s\), best trial \d loss=1\.25$",
                     out, re.M), out  # fmt: skip

    ktrain = str(Path(sys.executable).parent / "ktrain")  # the console script says the same
    cli = subprocess.run([ktrain, "attach", "ka"], capture_output=True, text=True, check=False)
    assert cli.returncode == 0, cli.stderr
    assert "Sweep 'ka' (local): Interrupted: 2 of 3 trial(s) ended" in cli.stdout, cli.stdout
    assert f"cancel it with `ktrain cancel {trial.job} --run {trial.run}`" in cli.stdout

    shell.run_line_magic("ktrain", "delete ka")
    out = _plain(capsys.readouterr().out)
    assert "Deleted sweep 'ka': its record and its job(s) ka-w0, ka-w1." in out, out
    assert read_sweep("ka") is None
    assert LocalBackend().list_jobs() == []  # its warm jobs, the running trial's too


def test_ctrl_c_cancels_every_running_trial_and_ends_the_warm_jobs(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    proc = _start(tmp_path, "cc", "3,4")

    def both_running(rows: Sequence[TrialRow]) -> bool:
        return len(rows) == 2 and all(r.state == "Running" for r in rows)

    record = _wait_record(proc, "cc", both_running)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    out, _ = proc.communicate(timeout=120)
    assert time.monotonic() - started < 60, out  # a trial alone reports for a minute
    assert "Sweep 'cc' interrupted: its running trials were cancelled." in out, out
    assert "Ended the sweep's warm job(s) cc-w0, cc-w1." in out, out
    backend = LocalBackend()
    for row in record.rows:  # each trial's run was cancelled, its warm job ended
        assert backend.run_status(row.job, row.run).state == "Cancelled"
    assert all(s.terminal for s in backend.list_jobs()), backend.list_jobs()
    kept = read_sweep("cc")
    assert kept is not None
    assert (kept.state, seen_state(kept)) == ("Interrupted", "Interrupted")
    assert [r.state for r in kept.rows] == ["Cancelled", "Cancelled"]
