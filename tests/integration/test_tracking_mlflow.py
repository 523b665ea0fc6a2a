"""Every job a tracked MLflow run: real local torchrun jobs through the ``%%ktrain`` magic,
logged to a real ``mlflow server`` (SQLite store) and read back through its REST API. Faults
are caused for real: a rank kills itself (SIGKILL), the tracking server is killed with
``kill -9`` and started again, the follower is interrupted and attaches again."""

from __future__ import annotations

import dataclasses
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import JobNotFound
from jupyter_ktrain.pod.protocol import parse_line
from tests.mlflow_server import MlflowServer
from tests.notebook_cells import extension_shell

pytest.importorskip("mlflow")
pytestmark = pytest.mark.slow

SETUP = """
import os, signal, time
import jupyter_ktrain as ktrain

LR = 0.05
LAYERS = [64, 32]
MARKS = None

def train(steps, pause=0.0, kill_at=None):
    rank = int(os.environ["RANK"])
    mark = os.path.join(MARKS, "killed")
    assert len(LAYERS) == 2  # a constant the job uses: captured, a param
    print(f"rank {rank} starts", flush=True)
    for step in range(steps):
        ktrain.report(step=step, total=steps, loss=1.0 / (step + 1) + rank, lr=LR)
        if rank == 3 and step == kill_at and not os.path.exists(mark):
            open(mark, "a").close()
            time.sleep(0.3)  # the record is out before the kill
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(pause)
    return steps * LR

def spin(seconds):
    # keep a core busy for the seconds given, reporting every millisecond or two
    end, step = time.time() + seconds, 0
    while time.time() < end:
        sum(i * i for i in range(20000))
        ktrain.report(step=step, loss=1.0 / (step + 1))
        step += 1
    return step
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    s = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    s.start()
    yield s
    s.kill()


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[InteractiveShell]:
    marks = tmp_path / "marks"
    marks.mkdir()
    yield from extension_shell(SETUP + f"MARKS = {str(marks)!r}\n")


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _run(server: MlflowServer, name: str, experiment: str) -> dict[str, Any]:
    exp = server.get("experiments/get-by-name", experiment_name=experiment)["experiment"]
    found = server.post(
        "runs/search",
        {"experiment_ids": [exp["experiment_id"]], "filter": f"tags.`ktrain.job` = '{name}'"},
    )["runs"]
    assert len(found) == 1, found  # one run per job, also after a restart or a re-attach
    run: dict[str, Any] = found[0]
    return run


def _steps(server: MlflowServer, run_id: str, key: str) -> list[int]:
    return sorted(int(p.get("step", 0)) for p in server.history(run_id, key))


def _wait(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def test_a_2x2_job_is_one_run_with_its_params_every_point_and_its_logs(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell.run_cell(f"%ktrain config mlflow={server.uri}").success
    result = shell.run_cell(
        "%%ktrain --nodes 2 --procs-per-node 2 --name tracked --experiment exp-a\nr = train(30)\n"
    )
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    run = _run(server, "tracked", "exp-a")
    run_id = run["info"]["run_id"]
    assert f"MLflow: {server.uri}/#/experiments/" in out, out
    assert run_id in out, out
    assert run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["nodes"] == "2"
    assert params["procs_per_node"] == "2"
    assert params["const.LR"] == "0.05"
    assert params["const.LAYERS"] == "[64, 32]"
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["ktrain.state"] == "Succeeded"
    assert len(tags["ktrain.code_sha256"]) == 64
    # every point of every rank, once, at its step
    for key in ("loss", "rank1/loss", "rank2/loss", "rank3/loss", "lr"):
        assert _steps(server, run_id, key) == list(range(30)), key
    rank2 = server.history(run_id, "rank2/loss")
    assert sorted(p["value"] for p in rank2)[0] == pytest.approx(2 + 1 / 30)
    assert [p["value"] for p in server.history(run_id, "result/r")] == [pytest.approx(1.5)]
    files = set(server.artifacts(run_id))
    assert {"ktrain/program.py", "ktrain/launch.txt", "logs/job.log"} <= files, files
    assert {f"logs/rank{r}.log" for r in range(4)} <= files, files
    program = (Path(run["info"]["artifact_uri"]) / "ktrain/program.py").read_text()
    assert "LR = 0.05" in program


def test_a_job_that_keeps_every_core_busy_gets_its_points_sent_after_it_not_during_it(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """A local job with a rank on every core of this machine: its tracking takes none of their
    CPU (no point reaches the server while the job runs), every point arrives after its end,
    and the cell says why they came late."""
    cores = len(os.sched_getaffinity(0))
    if cores > 8:
        pytest.skip(f"a rank a core: {cores} cores are too many for one test")
    backend = LocalBackend()
    seen_running: list[int] = []
    stop = threading.Event()

    def watch() -> None:  # what a user watching the MLflow UI during the job sees
        while not stop.is_set():
            try:
                runs = server.runs("exp-busy")
            except OSError:
                runs = []
            points = sum(len(server.history(r["info"]["run_id"], "loss")) for r in runs)
            try:
                running = not backend.status("busy").terminal  # read after the points
            except Exception:  # not made yet
                running = False
            if points and running:
                seen_running.append(points)
            time.sleep(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        result = shell.run_cell(
            f"%%ktrain --nodes 1 --procs-per-node {cores} --name busy --mlflow {server.uri} "
            "--experiment exp-busy\nsteps = spin(4)\n"
        )
    finally:
        stop.set()
        t.join(timeout=30)
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    assert seen_running == [], f"points reached the server while the job ran: {seen_running}"
    assert re.search(r"points; sending waited \d+ s for spare CPU, not to slow the job\)", out)
    run_id = _run(server, "busy", "exp-busy")["info"]["run_id"]
    steps = shell.user_ns["steps"]  # rank 0's
    assert steps > 100, steps
    assert _steps(server, run_id, "loss") == list(range(steps))


def test_a_restarted_job_reports_no_step_twice(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell(
        f"%%ktrain --nodes 2 --procs-per-node 2 --name restarted --mlflow {server.uri}\n"
        "r = train(20, pause=0.1, kill_at=5)\n"
    )
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    assert "restarted after exit 137" in out, out
    run = _run(server, "restarted", "ktrain")
    run_id = run["info"]["run_id"]
    for key in ("loss", "rank3/loss"):  # steps 0..5 came twice from the ranks: sent once
        assert _steps(server, run_id, key) == list(range(20)), key
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["ktrain.restarts"] == "2"  # each of the two nodes started again once


def test_the_tracking_server_killed_and_started_again_mid_job_gets_every_point_once(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    restarted = threading.Event()

    def outage() -> None:
        _wait(lambda: _reached(LocalBackend(), "outage", 20), 120, "step 20")
        server.kill()
        time.sleep(3)  # the job reports on while the server is down
        server.start()
        restarted.set()

    t = threading.Thread(target=outage, daemon=True)
    t.start()
    result = shell.run_cell(
        f"%%ktrain --nodes 1 --procs-per-node 2 --name outage --mlflow {server.uri}\n"
        "r = train(150, pause=0.05)\n"
    )
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    t.join(timeout=300)
    assert restarted.is_set()
    # one warning when the sender tried while the server was down; on a machine the tests keep
    # busy it may have held the points through the whole outage (tracking waits for spare CPU)
    assert out.count("did not take the job's data") <= 1, out
    run_id = _run(server, "outage", "ktrain")["info"]["run_id"]
    _wait(lambda: _steps(server, run_id, "rank1/loss") == list(range(150)), 60, "all points")
    for key in ("loss", "rank1/loss", "lr"):
        assert _steps(server, run_id, key) == list(range(150)), key


def _reached(backend: LocalBackend, name: str, step: int) -> bool:
    """Whether rank 0 of local job ``name`` has reported ``step`` (read from its log)."""
    try:
        lines = [parse_line(raw) for _, raw in backend.read_logs(name)]
    except JobNotFound:
        return False
    return any(
        line.rank == 0 and line.record is not None and (line.record.get("step") or 0) >= step
        for line in lines
    )


def test_a_kernel_that_attaches_again_sends_no_point_twice(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    cell = (
        f"%%ktrain --nodes 1 --procs-per-node 2 --name reattach --mlflow {server.uri} "
        "--experiment exp-b --detach\nr = train(200, pause=0.05)\n"
    )
    assert shell.run_cell(cell).success
    # the first follower sees part of the job, then is interrupted (Ctrl-C); what it read goes
    # out as it detaches (also what it held for spare CPU on a busy machine)
    import _thread

    def interrupt() -> None:
        _wait(lambda: _reached(LocalBackend(), "reattach", 20), 240, "step 20")
        _thread.interrupt_main()

    t = threading.Thread(target=interrupt, daemon=True)
    t.start()
    shell.run_cell("%ktrain attach reattach")
    t.join()
    out = _plain(capsys.readouterr().out)
    assert "Detached from 'reattach'" in out, out
    run_id = _run(server, "reattach", "exp-b")["info"]["run_id"]
    first = len(server.history(run_id, "loss"))
    assert 0 < first < 200, first
    # a later follower (a restarted kernel reads the same job store) replays every line
    assert shell.run_cell("%ktrain attach reattach").success
    assert _run(server, "reattach", "exp-b")["info"]["run_id"] == run_id
    for key in ("loss", "rank1/loss"):
        assert _steps(server, run_id, key) == list(range(200)), key


def test_a_detached_job_the_side_panel_follows_is_logged_by_the_server_once(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """No kernel follows a ``--detach``ed job; two panel servers poll it (two Jupyter servers
    on one job store): one logs it, every point once, and finishes the run with its logs; a
    kernel attaching afterwards sends nothing again."""
    from jupyter_ktrain.server.core import PanelCore

    cell = (
        f"%%ktrain --nodes 1 --procs-per-node 2 --name panel-tracked --mlflow {server.uri} "
        "--experiment exp-p --detach\nr = train(40, pause=0.05)\n"
    )
    assert shell.run_cell(cell).success
    cores = [PanelCore.from_names(("local",)) for _ in range(2)]
    # each server's first poll saw it not started yet (as on a busy machine): no start time
    backend = LocalBackend()
    unstarted = dataclasses.replace(backend.status("panel-tracked"), state="Pending", started=None)
    for core in cores:
        core.tracking.poll(backend, "panel-tracked", unstarted)
    deadline = time.monotonic() + 240
    while not cores[0].job("panel-tracked")["terminal"]:
        assert time.monotonic() < deadline, "the job did not end"
        for core in cores:
            core.metrics("panel-tracked")
        time.sleep(0.3)
    for core in cores:  # the polls after its end: the run is finished, once
        core.metrics("panel-tracked")

    def finished() -> bool:
        try:
            return bool(_run(server, "panel-tracked", "exp-p")["info"]["status"] == "FINISHED")
        except (OSError, KeyError):
            return False

    _wait(finished, 60, "the run finished by the server")
    run = _run(server, "panel-tracked", "exp-p")
    run_id = run["info"]["run_id"]
    for key in ("loss", "rank1/loss", "lr"):
        assert _steps(server, run_id, key) == list(range(40)), key
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["ktrain.state"] == "Succeeded"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["const.LR"] == "0.05"
    assert {"logs/job.log", "logs/rank0.log", "logs/rank1.log"} <= set(server.artifacts(run_id))
    # the kernel attaching afterwards: everything was sent, nothing goes twice
    capsys.readouterr()
    assert shell.run_cell("%ktrain attach panel-tracked").success
    assert _run(server, "panel-tracked", "exp-p")["info"]["run_id"] == run_id
    assert _steps(server, run_id, "loss") == list(range(40))


def test_ktrain_run_and_the_cell_make_the_same_mlflow_run_fields(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same options through ``%%ktrain`` and ``ktrain.run``: the same params (apart from
    the job's name) and the same tags, because both go through the one runner."""
    import jupyter_ktrain as ktrain

    flags = f"--nodes 1 --procs-per-node 2 --mlflow {server.uri} --experiment same"
    result = shell.run_cell(f"%%ktrain {flags} --name same-cell\ntrain(3)\n")
    assert result.error_in_exec is None, _plain(capsys.readouterr().out)
    job = ktrain.run(
        shell.user_ns["train"],
        args=(3,),
        nodes=1,
        procs_per_node=2,
        mlflow=server.uri,
        experiment="same",
        name="same-python",
    )
    out = _plain(capsys.readouterr().out)
    assert job.state == "Succeeded", out
    cell, python = _run(server, "same-cell", "same"), _run(server, "same-python", "same")

    def fields(run: dict[str, Any], part: str) -> dict[str, str]:
        return {p["key"]: p["value"] for p in run["data"][part]}

    cell_params, python_params = fields(cell, "params"), fields(python, "params")
    assert cell_params.pop("name") == "same-cell"
    assert python_params.pop("name") == "same-python"
    assert cell_params == python_params
    assert cell_params["const.LR"] == "0.05"
    assert set(fields(cell, "tags")) == set(fields(python, "tags"))
    assert fields(python, "tags")["ktrain.state"] == "Succeeded"
    assert set(server.artifacts(cell["info"]["run_id"])) == set(
        server.artifacts(python["info"]["run_id"])
    )


@pytest.mark.parametrize("warm", [False, True], ids=["a-job-each", "warm"])
def test_a_sweep_is_one_parent_run_with_a_child_run_per_trial(
    server: MlflowServer, shell: InteractiveShell, capsys: pytest.CaptureFixture[str], warm: bool
) -> None:
    """Two trials, each its own job (or its run of the warm job): each a child run of the
    sweep's run (tagged ``mlflow.parentRunId``) with its params and points as a plain job's;
    the parent has what was searched and, at the end, the best trial."""
    name, experiment = ("swept-warm", "exp-sw") if warm else ("swept", "exp-s")
    flags = (
        f"--nodes 1 --procs-per-node 1 --name {name} --mlflow {server.uri} "
        f'--experiment {experiment} --sweep "steps=choice(3,5)" --objective loss:min --no-prune'
        + (" --warm" if warm else "")
    )
    sweep = shell.run_cell_magic("ktrain", flags, "r = train(steps)\n")
    out = _plain(capsys.readouterr().out)
    assert [t.state for t in sweep.trials] == ["Succeeded", "Succeeded"], out
    exp = server.get("experiments/get-by-name", experiment_name=experiment)["experiment"]
    found = server.post(
        "runs/search",
        {"experiment_ids": [exp["experiment_id"]], "filter": f"tags.`ktrain.sweep` = '{name}'"},
    )["runs"]
    parents = [r for r in found if r["info"]["run_name"] == name]
    assert len(parents) == 1, found  # one parent
    parent = parents[0]
    parent_id = parent["info"]["run_id"]
    assert f"MLflow: the sweep's run {server.uri}/#/experiments/" in out, out
    assert parent_id in out, out
    assert parent["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in parent["data"]["params"]}
    assert params == {
        "space.steps": "choice(3, 5)", "objective": "loss:min", "search": "grid",
        "trials": "2", "parallel": "1",
    }  # fmt: skip
    tags = {t["key"]: t["value"] for t in parent["data"]["tags"]}
    assert (tags["ktrain.state"], tags["best.steps"]) == ("Done", "5")
    best = next(t for t in sweep.trials if t.params["steps"] == 5)
    assert tags["best.trial"] == str(best.number)
    metrics = {m["key"]: m["value"] for m in parent["data"]["metrics"]}
    assert metrics == {"best/loss": pytest.approx(0.2)}
    children = [r for r in found if r["info"]["run_id"] != parent_id]
    assert len(children) == 2, found
    for child in children:  # each trial: its job's run, under the parent
        tags = {t["key"]: t["value"] for t in child["data"]["tags"]}
        assert tags["mlflow.parentRunId"] == parent_id
        trial = sweep.trials[int(tags["ktrain.trial"])]
        if warm:  # its run of the warm job
            assert tags["ktrain.job"] == trial.job == f"{name}-w0"
            assert tags["ktrain.run"] == str(trial.run)
            assert child["info"]["run_name"] == f"{name}-w0 run {trial.run}"
        else:
            assert tags["ktrain.job"] == trial.job == f"{name}-t{trial.number}"
        assert tags["ktrain.state"] == "Succeeded"
        assert child["info"]["status"] == "FINISHED"
        params = {p["key"]: p["value"] for p in child["data"]["params"]}
        steps = trial.params["steps"]
        assert params["const.steps"] == str(steps)  # its swept value, as the cell's constant
        assert params["const.LR"] == "0.05"
        assert params["nodes"] == "1"
        assert _steps(server, child["info"]["run_id"], "loss") == list(range(steps))
