"""Local jobs restart a fault and fail a bug at once, as the Training Operator's ``ExitCode``
policy does on a cluster: real torchrun jobs through the ``%%ktrain`` magic (text monitor),
with a rank that really kills itself with SIGKILL or really raises."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend, planner
from jupyter_ktrain.backends.local.procs import marked_pids, node_pids, process_start
from jupyter_ktrain.errors import JobFailed

pytestmark = pytest.mark.slow

SETUP = """
import os, signal
import torch
import torch.distributed as dist

MARKS = None  # a folder, set by each test: what the ranks of earlier attempts left

def flaky(steps, kill_rank=3, every_time=False, fail_rank=None):
    mark = os.path.join(MARKS, "killed")
    attempt = 2 if os.path.exists(mark) else 1
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} up (attempt {attempt})", flush=True)
    total = 0.0
    for step in range(steps):
        t = torch.ones(1) * (rank + 1)
        dist.all_reduce(t)
        total += t.item()
        if rank == fail_rank and step == 1:
            raise ValueError("bad shard")
        if rank == kill_rank and step == 2 and (every_time or not os.path.exists(mark)):
            open(mark, "a").close()
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    dist.destroy_process_group()
    return attempt, total
"""


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    marks = tmp_path / "marks"
    marks.mkdir()
    assert sh.run_cell(SETUP + f"MARKS = {str(marks)!r}\n", store_history=True).success
    yield sh
    sh.reset(new_session=True)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _marker(name: str) -> str:
    return str(json.loads((LocalBackend().job_dir(name) / "plan.json").read_text())["marker"])


def _wait(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


def test_a_killed_rank_restarts_every_node_once_and_the_finished_run_is_the_result(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell("%%ktrain --nodes 2 --procs-per-node 2 --name flaky\nr = flaky(5)\n")
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    # the cell's result is the second run's: it finished, the first never did
    assert shell.user_ns["r"] == (2, 50.0)
    status = LocalBackend().status("flaky")
    assert status.state == "Succeeded"
    assert status.max_restarts == 3
    assert [r.restarts for r in status.replicas] == [1, 1]
    node0, node1 = status.replicas
    assert node1.last_event == "restarted after exit 137, killed by signal 9 (SIGKILL)"
    assert node0.last_event.startswith("restarted with every node after node 1's exit 137")
    assert status.exit_codes == {0: 0, 1: 0, 2: 0, 3: 0}  # the finished run's
    # the restart as it happened: an alert in the cell, a line in every node's log
    alert = (
        "flaky-node-1 restarted after exit 137, killed by signal 9 (SIGKILL) "
        "(restart 1 of at most 3)"
    )
    assert alert in out, out
    said = (
        "[agent]: restart 1 of at most 3: node 1 exited 137 (rank 3 killed by signal 9 "
        "(SIGKILL)); starting every node again"
    )
    logs = LocalBackend().read_logs("flaky")
    assert sum(said in line for _, line in logs) == 2
    # the earlier attempt's lines are kept (appended to)
    rank0 = (LocalBackend().job_dir("flaky") / "rank-0.log").read_text()
    assert "rank 0 up (attempt 1)" in rank0
    assert "rank 0 up (attempt 2)" in rank0
    assert rank0.index("attempt 1") < rank0.index("attempt 2")
    assert not marked_pids(_marker("flaky"))
    # the side panel's detail of the job (what its REST API serves) says it too
    from jupyter_ktrain.server.core import PanelCore

    rows = {r["name"]: r for r in PanelCore({"local": LocalBackend}).job("flaky")["replicas"]}
    assert rows["flaky-node-1"]["restarts"] == 1
    assert rows["flaky-node-1"]["last_event"] == node1.last_event


def test_a_raising_rank_fails_at_once_without_a_restart(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell(
        "%%ktrain --nodes 2 --procs-per-node 2 --name bug\nflaky(5, kill_rank=None, fail_rank=3)\n"
    )
    out = _plain(capsys.readouterr().out)
    assert isinstance(result.error_in_exec, JobFailed)
    assert "JobFailed: rank 3 raised ValueError: bad shard" in out, out
    status = LocalBackend().status("bug")
    assert status.state == "Failed"
    assert status.failed_rank == 3
    assert [r.restarts for r in status.replicas] == [0, 0]
    assert "restart" not in status.message
    assert "restarted after" not in out
    assert "restart 1 of" not in out
    logs = "\n".join(line for _, line in LocalBackend().read_logs("bug"))
    assert "[agent]: restart" not in logs
    assert logs.count("up (attempt 1)") == 4
    assert "attempt 2" not in logs


def test_a_rank_killed_every_time_fails_once_its_restarts_ran_out(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell(
        "%%ktrain --nodes 2 --procs-per-node 2 --name doomed --max-restarts 1\n"
        "flaky(5, every_time=True)\n"
    )
    out = _plain(capsys.readouterr().out)
    assert isinstance(result.error_in_exec, JobFailed)
    status = LocalBackend().status("doomed")
    assert status.state == "Failed"
    assert status.failed_rank == 3
    assert status.max_restarts == 1
    assert [r.restarts for r in status.replicas] == [1, 1]
    assert status.message == (
        "rank 3 was killed by signal 9 (SIGKILL): a fault, and the restarts ran out "
        "(restarted 1 time, --max-restarts 1)"
    )
    assert "doomed-node-1 restarted after exit 137" in out
    assert "(restart 1 of at most 1)" in out
    assert "the restarts ran out" in out
    logs = "\n".join(line for _, line in LocalBackend().read_logs("doomed"))
    assert logs.count("[agent]: restart 1 of at most 1: node 1 exited 137") == 2
    assert "restart 2 " not in logs
    assert logs.count("rank 0 up (attempt 1)") == 1
    assert logs.count("rank 0 up (attempt 2)") == 1
    assert not marked_pids(_marker("doomed"))


def test_a_cancel_while_a_restart_waits_starts_nothing_more(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(planner, "RESTART_DELAY_S", 60.0)  # a wait long enough to cancel in
    job = shell.run_cell_magic(  # killed at every attempt: the second restart waits (backoff)
        "ktrain",
        "--nodes 2 --procs-per-node 2 --name waits --detach",
        "flaky(5, every_time=True)\n",
    )
    assert job is not None
    backend = LocalBackend()
    _wait(lambda: backend.status("waits").message.startswith("restart 2 "), 120, "restart 2")
    status = backend.status("waits")
    assert (status.state, status.reason) == ("Running", "Restarting")
    assert status.message.startswith("restart 2 of at most 3: node 1 exited 137")
    assert [(r.phase, r.restarts) for r in status.replicas] == [("Restarting", 2)] * 2
    marker = _marker("waits")
    _wait(lambda: not marked_pids(marker), 15, "the failed attempt's processes gone")
    started = time.monotonic()
    shell.run_line_magic("ktrain", "cancel waits")
    assert time.monotonic() - started < 10
    status = backend.status("waits")
    assert (status.state, status.reason) == ("Cancelled", "CancelledByUser")
    time.sleep(3)  # nothing starts after the cancel
    assert not marked_pids(marker)
    logs = "\n".join(line for _, line in backend.read_logs("waits"))
    assert logs.count("up (attempt 2)") == 4  # the first restart's four ranks, no third attempt
    assert backend.status("waits").state == "Cancelled"


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (by parent pid, read from ``/proc``)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += [child for child, parent in parents.items() if parent == pid]
    return tree


def _is_rank(pid: int) -> bool:
    try:
        return b"LOCAL_RANK=" in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def _checkpoints(folder: Path) -> set[int]:
    return {int(p.stem.split("-")[1]) for p in folder.glob("step-*.pt")}


def test_a_killed_node_takes_its_ranks_with_it_and_the_job_resumes_from_before_the_kill(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    """Notebook 04's fault: node 1's agent (its first process, what a container's end is)
    killed with SIGKILL mid-run. Its torchrun and ranks die with it at once, as on a cluster:
    no checkpoint is written after the kill (each needs all four ranks), and the restart
    resumes from the last one written before it."""
    from tests.resume_cells import SETUP as TRAIN

    assert shell.run_cell(TRAIN, store_history=True).success
    cell = "w, first = train(24, 3, pause=0.2)\n"
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 2 --name dies --detach", cell)
    assert job is not None
    job_dir = LocalBackend().job_dir("dies")
    folder = job_dir / "checkpoints"
    _wait(lambda: 5 in _checkpoints(folder), 90, "the checkpoint of step 5")
    agent = json.loads((job_dir / "state.json").read_text())["nodes"][1]["pid"]
    # the node's processes: its agent and what torchrun started (each rank's process; the
    # ranks themselves run forked from the job's fork server, and end with those)
    node = _tree(agent) + node_pids(_marker("dies"), 1)
    assert sum(map(_is_rank, node)) == 2, node  # its two ranks, under torchrun
    os.kill(agent, signal.SIGKILL)
    killed = time.monotonic()
    before = max(_checkpoints(folder))
    _wait(lambda: all(process_start(p) is None for p in node), 1.5, "node 1's processes gone")
    gone_after = time.monotonic() - killed
    # until the restart, no checkpoint is written: node 1's ranks are not there to make one
    # (the restart count stays; the restart's "Restarting" reason lasts a moment only)
    backend = LocalBackend()
    while not any(r.restarts for r in backend.status("dies").replicas):
        assert max(_checkpoints(folder)) == before
        assert time.monotonic() - killed < 30, "no restart within 30 s"
        time.sleep(0.02)
    assert max(_checkpoints(folder)) == before
    message = (
        "restart 1 of at most 3: node 1 exited 137 (killed by signal 9 (SIGKILL)); its ranks 2 "
        "and 3 were killed with it; starting every node again"
    )
    logs = [job_dir / "node-0.log", job_dir / "node-1.log"]
    _wait(lambda: all(message in log.read_text() for log in logs), 10, "the restart in each log")
    capsys.readouterr()
    result = shell.run_cell("%ktrain attach dies")
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    assert shell.user_ns["first"] == before + 1
    assert f"[ktrain] resumed from step {before} (checkpoint step-{before}.pt)" in out, out
    # the cell says what happened: node 1 and its ranks died; node 0's ranks lost their peer
    # (one line each, their gloo tracebacks are in their logs)
    alert = "dies-node-1 restarted after exit 137, killed by signal 9 (SIGKILL); its ranks 2 and 3"
    assert alert in out, out
    assert "[rank0]: lost its peer (gloo: Connection " in out, out
    assert "GLHF" not in out
    assert "GLHF" in (job_dir / "rank-0.log").read_text()
    status = backend.status("dies")
    assert (status.state, [r.restarts for r in status.replicas]) == ("Succeeded", [1, 1])
    said = (
        "restarted after exit 137, killed by signal 9 (SIGKILL); its ranks 2 and 3 were "
        "killed with it"
    )
    assert status.replicas[1].last_event == said
    node_log = (job_dir / "node-1.log").read_text()
    assert (
        "[agent]: node 1 exited 137 (killed by signal 9 (SIGKILL)); its 3 remaining processes "
        "(ranks 2 and 3 among them) were killed with it (SIGKILL), as a container's are"
    ) in node_log, node_log[-3000:]
    assert gone_after < 1.0, gone_after


READY = """
import json, os, time
import torch
import torch.distributed as dist

def steady(steps, marks):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    attempt = len([n for n in os.listdir(marks) if n.startswith(f"rank-{rank}-")]) + 1
    launcher = int(os.environ.get("KTRAIN_LAUNCHER_PID") or os.getppid())  # its torchrun
    with open(f"/proc/{launcher}/cmdline", "rb") as f:
        torchrun = f.read().replace(b"\\0", b" ").decode()
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:  # forked: the fork server
        parent = f.read().replace(b"\\0", b" ").decode()
    start = {"pid": os.getpid(), "torchrun": torchrun, "parent": parent, "ppid": os.getppid(),
             "forked": os.environ.get("KTRAIN_FORKED"), "t": time.time(),
             "server": os.environ.get("KTRAIN_FORK_SOCKET")}
    for step in range(steps if attempt == 1 else 5):  # the first runs until it is killed
        t = torch.ones(1)
        dist.all_reduce(t)
        if step == 0:
            start["first_step"] = time.time()
            with open(os.path.join(marks, f"rank-{rank}-{attempt}.json"), "w") as f:
                json.dump(start, f)
        time.sleep(0.2)
    dist.destroy_process_group()
    return attempt
"""


def _steady_job(tmp_path: Path, flags: str) -> tuple[InteractiveShell, Path]:
    """A fresh shell with :data:`READY` run, and ``steady(600, MARKS)`` submitted detached with
    ``flags``; the shell and the marks folder its ranks write to."""
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    marks = tmp_path / "marks"
    marks.mkdir()
    assert sh.run_cell(READY, store_history=True).success
    cell = f"n = steady(600, {str(marks)!r})\n"
    assert sh.run_cell_magic("ktrain", f"{flags} --detach", cell)
    return sh, marks


def test_a_rank_killed_from_outside_restarts_forked_from_a_ready_interpreter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of a rank's training process mid-run, default options: the restart shows as
    every restart does, and the restarted ranks start forked from the job's fork server,
    which imported torch before it took requests (no new interpreter); so does the
    restarted nodes' torchrun (no new import of torch before the ranks fork). The first start
    forks from it too: the job imports torch once, in the server."""
    sh, marks = _steady_job(tmp_path, "--nodes 2 --procs-per-node 2 --name oom")
    try:
        first = marks / "rank-3-1.json"
        every = [marks / f"rank-{r}-1.json" for r in range(4)]
        _wait(lambda: all(p.exists() for p in every), 90, "every rank's first step")
        os.kill(json.loads(first.read_text())["pid"], signal.SIGKILL)  # as the OOM killer does
        killed = time.time()
        capsys.readouterr()
        result = sh.run_cell("%ktrain attach oom")
        out = _plain(capsys.readouterr().out)
        assert result.error_in_exec is None, out
        assert sh.user_ns["n"] == 2
    finally:
        sh.reset(new_session=True)
    status = LocalBackend().status("oom")
    assert (status.state, [r.restarts for r in status.replicas]) == ("Succeeded", [1, 1])
    assert status.replicas[1].last_event == "restarted after exit 137, killed by signal 9 (SIGKILL)"
    assert "oom-node-1 restarted after exit 137, killed by signal 9 (SIGKILL)" in out, out
    said = (
        "[agent]: restart 1 of at most 3: node 1 exited 137 (rank 3 killed by signal 9 "
        "(SIGKILL)); starting every node again"
    )
    assert sum(said in line for _, line in LocalBackend().read_logs("oom")) == 2
    again = [json.loads((marks / f"rank-{r}-2.json").read_text()) for r in range(4)]
    # (a value the notebook computed would travel by value: the rank's own facts are read here)
    assert all(a["forked"] is not None for a in again), again
    assert all("jupyter_ktrain.pod.agent.forks" in a["parent"] for a in again), again
    at_first = [json.loads((marks / f"rank-{r}-1.json").read_text()) for r in range(4)]
    assert all(a["forked"] is not None for a in at_first), at_first  # forked the first time too
    assert all("jupyter_ktrain.pod.agent.forks" in a["torchrun"] for a in at_first), at_first
    # the restarted nodes' torchrun was forked from the job's server (torch imported there):
    # the server's command line, not a torchrun started anew
    assert all("jupyter_ktrain.pod.agent.forks" in a["torchrun"] for a in again), again
    assert all("torch.distributed.run" not in a["torchrun"] for a in again), again
    forked_torchrun = "[agent]: torchrun starts forked from the job's fork server"
    assert sum(forked_torchrun in line for _, line in LocalBackend().read_logs("oom")) == 2
    back = max(a["first_step"] for a in again) - killed
    print(f"killed rank to the restarted job's first step: {back:.2f} s")
    assert not marked_pids(_marker("oom"))


def test_the_jobs_fork_server_killed_takes_its_ranks_and_the_job_restarts_without_it(
    tmp_path: Path,
) -> None:
    """kill -9 of the job's fork server mid-run, default options: every process it forked
    (each node's torchrun and every rank) dies with it, the job restarts as after any fault,
    and the restarted nodes, the job's server gone, each start a fork server of their own (as a
    pod's agent does) and fork their ranks from it; the job ends as an uninterrupted one
    would."""
    sh, marks = _steady_job(tmp_path, "--nodes 2 --procs-per-node 1 --name cold")
    server = 0
    try:
        every = [marks / f"rank-{r}-1.json" for r in range(2)]
        _wait(lambda: all(p.exists() for p in every), 120, "first steps")
        first = json.loads(every[1].read_text())
        assert first["forked"] is not None, first
        server = int(first["ppid"])  # the job's fork server forked it
        os.kill(server, signal.SIGKILL)
        _wait(lambda: (marks / "rank-1-2.json").exists(), 120, "the restarted rank's first step")
        result = sh.run_cell("%ktrain attach cold")
        assert result.error_in_exec is None
        assert sh.user_ns["n"] == 2
    finally:
        sh.reset(new_session=True)
    again = [json.loads((marks / f"rank-{r}-2.json").read_text()) for r in range(2)]
    assert all(a["forked"] is not None for a in again), again
    assert all(a["ppid"] != server for a in again), again  # not the killed one
    assert len({a["ppid"] for a in again}) == 2, again  # a server of each node's own now
    status = LocalBackend().status("cold")
    assert (status.state, [r.restarts for r in status.replicas]) == ("Succeeded", [1, 1])
    assert not marked_pids(_marker("cold"))
