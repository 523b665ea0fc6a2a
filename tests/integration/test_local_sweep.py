"""Sweeps on the local backend, driven through %%ktrain in a real IPython shell and through
``ktrain.sweep`` in a plain Python process: real trials, each a real job (or a run on one of
the sweep's real warm jobs), their objectives read from what they reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.store.sweeps import read_sweep
from jupyter_ktrain.sweep.record import seen_state, sweep_of
from jupyter_ktrain.sweep.trials import Sweep
from tests.notebook_cells import extension_shell

pytestmark = pytest.mark.slow

SETUP = """
import time
import jupyter_ktrain as ktrain

def train(lr, batch):
    # the loss falls with the steps, to a floor set by the values: lowest at lr=0.01, batch=32
    for step in range(4):
        loss = abs(lr - 0.01) * 100 + 32 / batch + 1.0 / (step + 1)
        ktrain.report(step=step, loss=loss)
    return {"lr": lr, "batch": batch, "loss": loss}

def graded(x):
    # x=3 fails; x=4's loss stays high (slowly) while the others' falls: it is pruned
    if x == 3:
        raise ValueError("x=3 is refused")
    steps, pause = (200, 0.1) if x == 4 else (20, 0.05)
    for step in range(steps):
        loss = 10.0 if x == 4 else 1.0 / (step + 1)
        ktrain.report(step=step, loss=loss)
        time.sleep(pause)
    return x

def slow(x):
    for step in range(1200):
        ktrain.report(step=step, loss=float(x))
        time.sleep(0.05)
"""

ONE = "--nodes 1 --procs-per-node 1"


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    sh = extension_shell(SETUP)
    yield next(sh)
    for status in LocalBackend().list_jobs():  # no node outlives its test
        LocalBackend().delete(status.name)
    next(sh, None)


def _floor(lr: float, batch: int) -> float:
    return abs(lr - 0.01) * 100 + 32 / batch + 1.0 / 4


def test_a_warm_sweep_runs_its_trials_on_two_warm_jobs_and_binds_the_best(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell.run_cell("lr = 0.5\n", store_history=True).success  # the notebook's own lr
    flags = (
        f'{ONE} --warm --name sw --sweep "lr=loguniform(1e-3,1e-1)" --sweep "batch=choice(16,32)"'
        " --trials 4 --parallel 2 --objective loss:min --search random --no-prune"
    )
    sweep = shell.run_cell_magic("ktrain", flags, "r = train(lr=lr, batch=batch)\n")
    assert isinstance(sweep, Sweep)
    assert [t.number for t in sweep.trials] == [0, 1, 2, 3]
    assert {t.state for t in sweep.trials} == {"Succeeded"}
    assert {t.job for t in sweep.trials} == {"sw-w0", "sw-w1"}  # two warm jobs, runs on each
    for job in ("sw-w0", "sw-w1"):  # each trial a run of its own, run after run on its job
        runs = sorted(t.run or 0 for t in sweep.trials if t.job == job)
        assert runs == list(range(1, len(runs) + 1))
    for trial in sweep.trials:
        lr, batch = trial.params["lr"], trial.params["batch"]
        assert 1e-3 <= lr <= 1e-1
        assert batch in (16, 32)
        assert trial.objective == pytest.approx(_floor(lr, batch))
        assert trial.handle is not None
        assert trial.handle.result["lr"] == lr
        assert "x=3" not in trial.handle.logs()
    best = min(sweep.trials, key=lambda t: t.objective or 0.0)
    assert sweep.best is not None
    assert sweep.best.number == best.number
    assert shell.user_ns["r"] == {**best.params, "loss": pytest.approx(best.objective)}
    assert shell.user_ns["lr"] == 0.5  # a trial's values are bound for its job alone
    out = capsys.readouterr().out
    assert "Sweep 'sw': 4 trial(s), 2 at a time on 2 warm job(s)" in out
    assert out.count("trial 3 started on 'sw-w") == 1
    assert f"best: trial {best.number}, loss=" in out
    assert "Ended the sweep's warm job(s) sw-w0, sw-w1." in out
    for name in ("sw-w0", "sw-w1"):  # the sweep's warm jobs ended with it
        assert LocalBackend().status(name).terminal
    # %ktrain compare SWEEP: its trials, each a run of a warm job, with their swept values
    shell.run_line_magic("ktrain", "compare sw")
    out = capsys.readouterr().out
    rows = {line[:24].strip(): line[24:].split() for line in out.splitlines()[1:]}
    assert "trial 0" in out.splitlines()[0], out
    losses = [float(v) for v in rows["loss (last)"]]
    assert losses == [pytest.approx(t.objective, rel=1e-5) for t in sweep.trials], out
    assert [float(v) for v in rows["lr"]] == [pytest.approx(t.params["lr"], rel=1e-5)
                                              for t in sweep.trials], out  # fmt: skip
    assert "state" not in rows  # all succeeded: the same


def test_a_grid_sweep_goes_on_past_a_failed_trial_and_prunes_a_bad_one(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = (
        f'{ONE} --name gs --sweep "x=choice(1,2,3,4)" --parallel 4 --objective loss:min '
        "--prune-after 3"
    )
    sweep = shell.run_cell_magic("ktrain", flags, "y = graded(x)\n")
    by_x = {t.params["x"]: t for t in sweep.trials}
    assert sorted(by_x) == [1, 2, 3, 4]  # the grid: every point once, each its own job
    assert {t.job for t in sweep.trials} == {f"gs-t{n}" for n in range(4)}
    assert by_x[3].state == "Failed"
    assert "ValueError: x=3 is refused" in by_x[3].error
    assert by_x[4].state == "Pruned"
    assert by_x[4].objective == 10.0
    assert "worse than the other trials' median" in by_x[4].error
    assert LocalBackend().status(by_x[4].job).state == "Cancelled"  # its job was stopped
    for x in (1, 2):
        assert (by_x[x].state, by_x[x].objective) == ("Succeeded", pytest.approx(1.0 / 20))
    assert sweep.best is not None
    assert sweep.best.params["x"] in (1, 2)
    assert shell.user_ns["y"] == sweep.best.params["x"]
    out = capsys.readouterr().out
    assert f"trial {by_x[3].number} Failed" in out
    assert "ValueError: x=3 is refused" in out
    assert f"trial {by_x[4].number} Pruned, loss=10" in out
    assert "2 succeeded, 1 pruned, 1 failed" in out
    # the record every view reads says the same as the cell
    record = read_sweep("gs")
    assert record is not None
    assert (seen_state(record), record.objective, record.trials) == ("Done", "loss:min", 4)
    kept = sweep_of(record)
    assert [(t.number, t.state, t.objective, t.job) for t in kept.trials] == [
        (t.number, t.state, t.objective, t.job) for t in sweep.trials
    ]
    assert record.best == sweep.best.number
    assert all(r.started <= r.ended for r in record.rows)
    pruned_curve = record.curves[by_x[4].number]  # its loss as it reported it
    assert len(pruned_curve) >= 3
    assert pruned_curve[-1][1] == 10.0


PACED = """
def paced(x):
    for step in range(12 if x == 1 else 1200):
        ktrain.report(step=step, loss=float(x))
        time.sleep(0.05)
    return x
"""


def test_a_trial_whose_job_is_deleted_under_it_is_failed_and_the_sweep_goes_on(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """``%ktrain delete`` of a running trial's job (from another kernel, say): that trial is
    recorded Failed with why, the slot lives on, and the sweep ends with every trial."""
    assert shell.run_cell(PACED).success

    def delete_the_long_trial() -> None:
        def running_job() -> str | None:
            record = read_sweep("dl")
            for row in record.rows if record is not None else ():
                if row.params == {"x": 2} and row.state == "Running" and row.objective:
                    return row.job
            return None

        deadline = time.monotonic() + 120
        while (job := running_job()) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if job is not None:
            LocalBackend().delete(job)

    deleter = threading.Thread(target=delete_the_long_trial, daemon=True)
    deleter.start()
    flags = f'{ONE} --name dl --sweep "x=choice(1,2)" --parallel 2 --objective loss:min --no-prune'
    started = time.monotonic()
    sweep = shell.run_cell_magic("ktrain", flags, "y = paced(x)\n")
    deleter.join(timeout=30)  # its delete done before the fixture deletes what is left
    assert time.monotonic() - started < 50  # not the 60 s the deleted trial would have run
    by_x = {t.params["x"]: t for t in sweep.trials}
    assert len(sweep.trials) == 2  # the grid's two points, each once
    assert by_x[1].state == "Succeeded"
    assert by_x[2].state in ("Failed", "Cancelled"), by_x[2]
    assert by_x[2].error, by_x[2]
    assert shell.user_ns["y"] == 1
    record = read_sweep("dl")
    assert record is not None
    assert [r.state for r in record.rows] == [t.state for t in sweep.trials]
    assert f"trial {by_x[2].number} {by_x[2].state}" in capsys.readouterr().out


def test_stop_on_failure_ends_the_sweep_at_the_first_failed_trial(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = (
        f'{ONE} --warm --name sf --sweep "x=choice(3,1,2)" --objective loss:min --stop-on-failure'
    )
    sweep = shell.run_cell_magic("ktrain", flags, "y = graded(x)\n")
    *before, last = sweep.trials  # one at a time, in the grid's order, up to x=3's failure
    assert (last.params["x"], last.state) == (3, "Failed")
    assert [t.state for t in before] == ["Succeeded"] * len(before)
    assert "Stopping the sweep: trial" in capsys.readouterr().out
    with pytest.raises(UsageError) as caught:  # the same sweep again: its jobs exist
        shell.run_cell_magic("ktrain", flags, "y = graded(x)\n")
    assert "A job 'sf-w0' exists (an earlier sweep of this name?): add --replace" in str(
        caught.value
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ('--sweep "lr=logunifrm(1,2)" --objective loss:min', "unknown distribution 'logunifrm'"),
        ('--sweep "lr=loguniform(0,1)" --objective loss:min', "loguniform(a,b) needs a > 0"),
        ('--sweep "lr=uniform(2,1)" --objective loss:min', "must be below its high end"),
        ('--sweep "lr=choice(1,2)" --sweep "wd=choice(1,2)" --objective loss:min',
         "the cell does not read wd"),
        ('--sweep "lr=choice(1,2)" --parallel 0 --objective loss:min', "--parallel 0"),
        ('--sweep "lr=choice(1,2)" --trials 0 --objective loss:min', "--trials 0"),
        ('--sweep "lr=choice(1,2)" --objective loss', "--objective 'loss' is not NAME:min"),
        ('--sweep "lr=choice(1,2)"', "A sweep needs --objective"),
        ('--sweep "lr=choice(1,2)" --objective loss:min --detach', "--detach does not go with"),
        ('--sweep "lr=uniform(1,2)" --search grid --objective loss:min', "lr is continuous"),
        ("--trials 3", "--trials only apply to a sweep"),
    ],
)  # fmt: skip
def test_bad_sweep_input_is_one_error_before_anything_runs(
    shell: InteractiveShell, flags: str, said: str
) -> None:
    with pytest.raises(UsageError) as caught:
        shell.run_cell_magic("ktrain", f"{ONE} {flags}", "r = train(lr=lr, batch=16)\n")
    assert said in str(caught.value)
    assert LocalBackend().list_jobs() == []


SCRIPT = """
import json, sys
import jupyter_ktrain as ktrain

def train(lr, layers=1):
    for step in range(3):
        ktrain.report(step=step, acc=layers * 10 + lr + step)
    return layers * 10 + lr

if __name__ == "__main__":
    sweep = ktrain.sweep(
        train, {"lr": "choice(1, 2, 3)"}, objective="result:max", kwargs={"layers": 2},
        parallel=2, nodes=1, procs_per_node=1, name="plain", warm=True,
    )
    best = sweep.best
    print(json.dumps({"best": best.params, "value": best.handle.result,
                      "states": sorted(t.state for t in sweep.trials),
                      "errors": [t.error for t in sweep.trials if t.error],
                      "objectives": sorted(t.objective or 0 for t in sweep.trials)}))
"""


def test_ktrain_sweep_from_a_plain_python_script(tmp_path: Path) -> None:
    script = tmp_path / "sweep_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "KTRAIN_MONITOR": "text"},
            cwd=tmp_path,
            check=False,
        )
    finally:
        for status in LocalBackend().list_jobs():  # the script's jobs, in this test's store
            LocalBackend().delete(status.name)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    found = json.loads(lines[-1])
    assert found == {
        "best": {"lr": 3},
        "value": 23,
        "states": ["Succeeded"] * 3,
        "errors": [],
        "objectives": [21.0, 22.0, 23.0],  # the function's value: its result
    }
    assert any(line.startswith("Sweep 'plain': 3 trial(s), 2 at a time") for line in lines)
    assert any("best: trial" in line and "result=23" in line for line in lines)
    assert any("Ended the sweep's warm job(s) plain-w0, plain-w1." in line for line in lines)
