"""Warm jobs on the local backend, driven through %%ktrain in a real IPython shell: real warm
agents fork real ranks that rendezvous over gloo, run after run on the same nodes."""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.backends.local.procs import marked_pids
from jupyter_ktrain.errors import JobCancelled, JobFailed
from jupyter_ktrain.monitor.cell_error import job_error
from jupyter_ktrain.server.core import PanelCore
from tests.notebook_cells import extension_shell

pytestmark = pytest.mark.slow

SETUP = """
import os, signal, time
import torch
import torch.distributed as dist

SCALE = 10

def helper(x):
    return x + 1

def train():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(helper(rank))])
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()} sum {t.item()} scale {SCALE}", flush=True)
    dist.destroy_process_group()
    return t.item() * SCALE

def fail_or_hang():
    rank = int(os.environ["RANK"])
    print(f"rank {rank} up", flush=True)
    if rank == 3:
        raise ValueError("no shard for rank 3")
    if rank == 0:  # hung: deaf to SIGTERM, so only a SIGKILL ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)

def sleepy():
    print("sleeping", flush=True)
    time.sleep(600)

def ddp_train(epochs=4):  # the quickstart's: a DDP model, freed once the group is destroyed
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(256, 16, generator=torch.Generator().manual_seed(dist.get_rank()))
    for _ in range(epochs):
        for i in range(0, 256, 64):
            opt.zero_grad()
            model(x[i : i + 64]).pow(2).mean().backward()
            opt.step()
        total = torch.ones(1)
        dist.all_reduce(total)
    dist.destroy_process_group()
    return total.item()

def counted(steps=30):
    import jupyter_ktrain as ktrain
    for step in range(steps):
        ktrain.report(step=step, total=steps, loss=1.0 / (step + 1))
        time.sleep(0.05)
    return steps
"""

WARM = "--warm --nodes 2 --procs-per-node 2"


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    sh = extension_shell(SETUP)
    yield next(sh)
    for status in LocalBackend().list_jobs():  # no warm node outlives its test
        LocalBackend().delete(status.name)
    next(sh, None)


def _agents(name: str) -> list[int]:
    """The pids of the job's node agents, as its supervisor started them."""
    state = json.loads((LocalBackend().job_dir(name) / "state.json").read_text())
    return [int(n["pid"]) for n in state["nodes"]]


def _clean(name: str) -> None:
    """Nothing of the last run is left: the two node agents alone carry the job's marker, and
    the rendezvous port can be bound again."""
    backend = LocalBackend()
    plan = json.loads((backend.job_dir(name) / "plan.json").read_text())
    deadline = time.monotonic() + 5
    while len(marked_pids(plan["marker"])) > 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(marked_pids(plan["marker"])) == sorted(_agents(name))
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", int(plan["master_port"])))


def _run(shell: InteractiveShell, flags: str = WARM, body: str = "r = train()\n"):  # type: ignore[no-untyped-def]
    started = time.monotonic()
    job = shell.run_cell_magic("ktrain", flags, body)
    return job, time.monotonic() - started


def test_three_cells_on_one_warm_job_each_run_the_new_code(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    first, _ = _run(shell)
    assert (first.run, shell.user_ns["r"]) == (1, 100.0)  # (1+2+3+4) x 10
    agents = _agents(first.name)
    assert shell.run_cell("def helper(x):\n    return x * 2\n", store_history=True).success
    second, _ = _run(shell)
    assert (second.name, second.run, shell.user_ns["r"]) == (first.name, 2, 120.0)
    assert shell.run_cell("SCALE = 3\n", store_history=True).success
    third, _ = _run(shell)
    assert (third.name, third.run, shell.user_ns["r"]) == (first.name, 3, 36.0)
    out = capsys.readouterr().out
    assert f"Run 2 on the warm job {first.name!r}" in out
    assert (
        f"The warm job {first.name!r} keeps its nodes for the next --warm cell; it ends "
        "after 15 min without a run" in out
    )
    assert _agents(first.name) == agents  # the same nodes ran all three
    for run, (total, scale) in {1: (10.0, 10), 2: (12.0, 10), 3: (12.0, 3)}.items():
        for rank in range(4):  # every rank's lines, in its run only
            line = f"rank {rank} of 4 sum {total} scale {scale}"
            assert third.logs(run=run, rank=rank).strip() == line
    assert (first.result, second.result, third.result) == (100.0, 120.0, 36.0)
    whole = "\n".join(line for _, line in LocalBackend().read_logs(first.name))
    assert "sum 10.0 scale 10" in whole
    assert "sum 12.0 scale 3" in whole
    assert LocalBackend().attach(first.name).run == 3  # a new kernel follows the last run
    status = LocalBackend().status(first.name)
    assert status.state == "Running"
    assert status.warm is not None
    assert status.warm.runs == 3
    _clean(first.name)


@pytest.mark.timeout(150)
def test_twelve_warm_runs_of_a_ddp_model_each_end(shell: InteractiveShell) -> None:
    """A warm run's rank has torch and ``torch._dynamo`` imported ahead (forked from its warm
    node), which made PyTorch's process-group destructor deadlock with gloo's worker thread
    over the GIL as the program freed its DDP model: 1 run in 4 never ended. The runtime keeps
    destroyed groups alive, so every run ends (a hang is this test's timeout)."""
    runs = []
    for _ in range(12):
        job, took = _run(shell, body="r = ddp_train()\n")
        assert (job.state, shell.user_ns["r"]) == ("Succeeded", 4.0)
        runs.append(took)
    assert job.run == 12
    assert max(runs[1:]) < 20, runs  # a warm run takes about a second here
    _clean(job.name)


def test_every_view_shows_a_warm_run_s_progress_and_what_its_starting_nodes_do(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """The panel's rows (its API) during the cell: first what the new warm job's nodes do
    (they import torch), then the run's progress as the cell's monitor counts it."""
    core = PanelCore.from_names(["local"])
    rows: list[tuple[object, object]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            rows.extend((j["progress"], j["warm"]) for j in core.jobs()["jobs"])
            time.sleep(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        job, _ = _run(shell, "--warm --nodes 1 --procs-per-node 2", "r = counted()\n")
    finally:
        stop.set()
        poller.join()
    assert shell.user_ns["r"] == 30
    shorts = [w["short"] for _, w in rows if isinstance(w, dict)]
    assert "warm · starting: its nodes import torch (0 of 1 ready)" in shorts
    shown = [p for p, _ in rows if isinstance(p, dict)]
    assert shown, "the panel never showed the run's progress"
    assert {p["total"] for p in shown} == {30}
    assert max(p["done"] for p in shown) >= 20
    out = capsys.readouterr().out
    assert "waiting for the warm job's nodes: its nodes import torch (0 of 1 ready)" in out
    run = job.status()  # the run: where it ended, as the widget's header shows (set_live)
    assert run.progress is not None
    assert run.progress.head() == "100% (30/30)"
    assert LocalBackend().status(job.name).progress is None  # idle: no run in progress


def test_a_failed_run_with_a_hung_rank_then_a_good_one_on_the_same_nodes(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    good, _ = _run(shell)
    agents = _agents(good.name)
    result = shell.run_cell(f"%%ktrain {WARM}\nfail_or_hang()\n")
    assert isinstance(result.error_in_exec, JobFailed)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    error = out[out.index("JobFailed: ") :]
    assert error.startswith("JobFailed: rank 3 raised ValueError: no shard for rank 3"), error
    assert "--rank 3 --run 2" in error
    failed = LocalBackend().run_status(good.name, 2)
    assert (failed.state, failed.failed_rank) == ("Failed", 3)
    assert failed.exit_codes[0] == 137  # the hung rank, deaf to SIGTERM, was killed
    _clean(good.name)  # the hung rank is gone, the port is free
    again, _ = _run(shell)
    assert (again.name, again.run, shell.user_ns["r"]) == (good.name, 3, 100.0)
    assert _agents(good.name) == agents


def test_a_cancelled_run_then_a_good_one(shell: InteractiveShell) -> None:
    job, _ = _run(shell, WARM + " --detach", "sleepy()\n")
    deadline = time.monotonic() + 30
    while "sleeping" not in job.logs(rank=3) and time.monotonic() < deadline:
        time.sleep(0.05)
    job.cancel()
    status = job.status()
    assert (status.state, status.reason) == ("Cancelled", "CancelledByUser")
    _clean(job.name)
    again, _ = _run(shell)
    assert (again.name, again.run, shell.user_ns["r"]) == (job.name, 2, 100.0)
    error = job_error(job, job.status())  # what the cell of a cancelled run says
    assert isinstance(error, JobCancelled)
    assert f"{job.name!r} run 1 was cancelled by the user" in str(error)


def test_a_shape_change_starts_a_new_job_and_says_why(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    first, _ = _run(shell)
    other, _ = _run(shell, "--warm --nodes 1 --procs-per-node 2")
    out = capsys.readouterr().out
    assert (other.name != first.name, other.run) == (True, 1)
    assert f"the warm job {first.name!r} has another shape (--nodes 2 -> 1)" in out
    assert shell.user_ns["r"] == 30.0  # (1+2) x 10 on one node
    # --name of a warm job with another shape: that job is replaced, and the cell says so
    named, _ = _run(shell, f"--warm --nodes 1 --procs-per-node 1 --name {first.name}")
    out = capsys.readouterr().out
    assert f"the warm job {first.name!r} has another shape (--nodes 2 -> 1, " in out
    assert "it is deleted and a new warm job of this shape starts in its place" in out
    assert (named.name, named.run, shell.user_ns["r"]) == (first.name, 1, 10.0)


def test_idle_limit_ends_the_job_and_the_next_cell_says_so(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job, _ = _run(shell)
    plan = json.loads((LocalBackend().job_dir(job.name) / "plan.json").read_text())
    idle = rf"{job.name} +local +Running · warm, 1 run\(s\), idle \d+s of 15m"
    deadline = time.monotonic() + 5  # the nodes' run ends reach the job's state a moment later
    while True:
        capsys.readouterr()
        shell.run_line_magic("ktrain", "list --backend local")
        listed = capsys.readouterr().out
        if re.search(idle, listed) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert re.search(idle, listed), listed
    shell.run_line_magic("ktrain", f"warm {job.name} --idle 1s")
    deadline = time.monotonic() + 15
    while not LocalBackend().status(job.name).terminal and time.monotonic() < deadline:
        time.sleep(0.1)
    status = LocalBackend().status(job.name)
    # as a cluster's warm job ends at its idle limit: its agents exit 0, the job succeeded
    assert (status.state, status.reason) == ("Succeeded", "IdleLimit"), status
    assert [r.exit_code for r in status.replicas] == [0, 0], status
    assert marked_pids(plan["marker"]) == []  # every process of it is gone
    capsys.readouterr()
    again, _ = _run(shell)
    out = capsys.readouterr().out
    assert again.name != job.name
    assert f"the warm job {job.name!r} was ended: its idle limit (1s)" in out
    shell.run_line_magic("ktrain", f"warm {again.name} --idle 0")
    ended = LocalBackend().status(again.name)
    assert (ended.state, ended.reason) == ("Succeeded", "IdleLimit"), ended
    with pytest.raises(UsageError, match="already ended"):
        shell.run_line_magic("ktrain", f"warm {again.name} --idle 0")


def test_warm_is_refused_where_it_is_not_supported_before_anything_starts(
    shell: InteractiveShell,
) -> None:
    with pytest.raises(UsageError, match="--warm is not supported for kind TFJob yet"):
        shell.run_cell_magic("ktrain", "--warm --kind TFJob", "r = train()\n")
    with pytest.raises(UsageError, match="--warm is not supported for kind MPIJob yet"):
        shell.run_cell_magic("ktrain", "--warm --kind MPIJob --backend kubernetes", "r = train()\n")
    assert LocalBackend().list_jobs() == []
    assert os.environ.get("KTRAIN_HOME")
