"""Local jobs under real faults: the supervisor killed with ``kill -9`` (alone, and with its
whole process group so that ranks are orphaned), a rank killed with ``kill -9``, a full disk (a
real small tmpfs as the job store), eight processes starting one job name at once, job names
that are paths, and a job store that cannot be written. Each is what a user would check: what
runs afterwards, what ``%ktrain status`` / ``ktrain`` / the panel's REST API say, and that the
user's files outside the store are untouched."""

from __future__ import annotations

import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.base import Job
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.backends.local.procs import marked_pids, process_start
from jupyter_ktrain.errors import JobFailed, SpecError
from jupyter_ktrain.frontends.cli import main as ktrain_cli
from tests.jupyter_process import PanelServer as Server
from tests.jupyter_process import panel_server
from tests.notebook_cells import extension_shell

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
KTRAIN = str(Path(sys.executable).parent / "ktrain")

SETUP = """
import os, time
import torch
import torch.distributed as dist

def hold():
    print(f"rank {os.environ['RANK']} up", flush=True)
    time.sleep(600)

def hold_with_helper():
    # a helper the rank starts in a session of its own (a data server, a log shipper): it
    # carries the job's environment, and nothing of the job's own ends it
    import subprocess
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    hold()

def chatter():
    print(f"rank {os.environ['RANK']} up", flush=True)
    line = "x" * 2000
    for i in range(10_000_000):
        print(i, line, flush=True)

def ring():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} up", flush=True)
    for step in range(100_000):
        t = torch.ones(1)
        dist.all_reduce(t)
        print(f"rank {rank} step {step}", flush=True)
        time.sleep(0.2)
"""


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    yield from extension_shell(SETUP)


def _wait(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.1)


def _job_dir(name: str) -> Path:
    return LocalBackend().job_dir(name)


def _marker(name: str) -> str:
    return str(json.loads((_job_dir(name) / "plan.json").read_text())["marker"])


def _supervisor(name: str) -> int:
    return int(json.loads((_job_dir(name) / "state.json").read_text())["supervisor_pid"])


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(e.decode().split("=", 1) for e in raw.split(b"\0") if b"=" in e)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _rank_pids(marker: str) -> dict[int, int]:
    """rank -> pid of the job's rank processes (torchrun's workers carry LOCAL_RANK)."""
    out = {}
    for pid in marked_pids(marker):
        env = _environ(pid)
        if "LOCAL_RANK" in env:
            out[int(env["RANK"])] = pid
    return out


def _start(shell: InteractiveShell, flags: str, body: str, ranks: int) -> Job:
    job = shell.run_cell_magic("ktrain", f"{flags} --detach", body)
    assert job is not None
    _wait(lambda: job.logs().count(" up\n") >= ranks, 90, f"{ranks} ranks up")
    return job


def _never_failed_while_running(job: Job, marker: str, seconds: float) -> None:
    """Ask for the status again and again: while any process of the job runs it must not
    read Failed (a user would cancel nothing, and the ranks would run on)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = job.status().state
        running = marked_pids(marker)  # after the status: a process then ran at it too
        assert not (state == "Failed" and running), (state, running)
        if state == "Failed":
            return
        time.sleep(0.05)


# -- 1. the supervisor killed ---------------------------------------------------------------
def test_killed_supervisor_takes_every_rank_with_it_and_the_status_says_why(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _start(shell, "--nodes 2 --procs-per-node 4 --name sup-kill", "hold()\n", ranks=8)
    marker = _marker(job.name)
    assert len(_rank_pids(marker)) == 8
    pid = _supervisor(job.name)
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would
    killed = time.monotonic()
    _never_failed_while_running(job, marker, seconds=15)
    _wait(lambda: not marked_pids(marker), 10 - (time.monotonic() - killed), "ranks gone")
    assert time.monotonic() - killed < 10
    # the watchdog's word, a moment after the last process went
    _wait(lambda: "stopped the" in job.status().message, 5, "the watchdog's final state")
    status = job.status()
    assert (status.state, status.reason) == ("Failed", "SupervisorKilled")
    said = f"its supervisor (pid {pid}) was killed by signal 9 (SIGKILL)"
    assert status.message.startswith(said), status.message
    capsys.readouterr()
    shell.run_line_magic("ktrain", "status sup-kill")
    shell.run_line_magic("ktrain", "cancel sup-kill")
    out = capsys.readouterr().out
    assert f"sup-kill on local: Failed (SupervisorKilled: {said}" in out
    assert "'sup-kill' already ended (Failed); nothing to cancel." in out
    # following it again fails the cell with the same reason, and the node logs say it too
    result = shell.run_cell("%ktrain attach sup-kill")
    assert isinstance(result.error_in_exec, JobFailed)
    assert f"Job 'sup-kill' failed: {said}" in str(result.error_in_exec)
    assert job.logs().count(f"[agent]: {said}") == 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A real Jupyter server with the panel's REST API, on its own job store."""
    tmp = tmp_path_factory.mktemp("faults-api")
    with panel_server(tmp, tmp / "ktrain-home") as server:
        yield server


def _cancel(front_end: str, name: str, server: Server) -> str:
    """Cancel ``name`` the way a user of ``front_end`` does; what the user reads back."""
    if front_end == "magic":
        shell = InteractiveShell.instance()
        shell.run_line_magic("ktrain", f"cancel {name}")
        return ""
    if front_end == "cli":
        env = {**os.environ, "KTRAIN_HOME": str(server.home)}
        run = subprocess.run([KTRAIN, "cancel", name], env=env, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        assert run.stderr == ""
        return run.stdout
    with server.client() as c:
        reply = c.post(f"jobs/{name}/cancel")
    assert reply.status_code == 200, reply.text
    body = reply.json()
    return f"{body['state']}: {body['message']}"


@pytest.mark.parametrize("front_end", ["magic", "cli", "rest"])
def test_orphaned_ranks_read_running_and_each_front_end_cancels_them(
    front_end: str,
    shell: InteractiveShell,
    server: Server,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KTRAIN_HOME", str(server.home))  # the store the server reads
    name = f"orphans-{front_end}"
    body = "hold_with_helper()\n"
    job = _start(shell, f"--nodes 2 --procs-per-node 2 --name {name}", body, ranks=4)
    marker = _marker(name)
    supervisor = _supervisor(name)
    watchdog = _parent(supervisor)
    # the supervisor's whole process group (its watchdog, the agents, torchrun) at once, as
    # `kill -9 -PGID` does. The ranks (forked by the job's fork server, which dies with the
    # supervisor) die with it; each rank's helper, in a session of its own, runs on
    os.killpg(os.getpgid(watchdog), signal.SIGKILL)
    # both gone (a killed process with threads can take a moment longer than its parent)
    gone = (watchdog, supervisor)
    _wait(lambda: all(process_start(p) is None for p in gone), 10, "the group gone")
    # SIGKILL is delivered to each member on its own time: wait until only the helpers are left
    _wait(lambda: len(marked_pids(marker)) == 4, 10, "only the ranks' helpers left")
    left = {_environ(p).get("RANK") for p in marked_pids(marker)}
    assert left == {"0", "1", "2", "3"}, "one helper of each rank outlived the job's processes"
    status = job.status()
    assert (status.state, status.reason) == ("Running", "SupervisorLost"), status
    assert f"4 process(es) of the job still run: `%ktrain cancel {name}`" in status.message
    capsys.readouterr()
    said = _cancel(front_end, name, server) or capsys.readouterr().out
    assert not marked_pids(marker)
    stopped = "was gone; the cancel stopped the 4 process(es) of the job that still ran"
    assert stopped in said, said
    after = job.status()
    assert (after.state, after.reason) == ("Cancelled", "CancelledByUser")
    assert stopped in after.message


# -- 7. a rank killed -----------------------------------------------------------------------
def test_a_killed_rank_is_named_with_its_signal_and_its_last_lines(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = "--nodes 2 --procs-per-node 2 --name rank-kill --max-restarts 0"  # no restart
    job = _start(shell, flags, "ring()\n", ranks=4)
    _wait(lambda: "rank 2 step 3" in job.logs(rank=2), 60, "rank 2 stepping")
    os.kill(_rank_pids(_marker(job.name))[2], signal.SIGKILL)
    assert job.wait(timeout=60) == "Failed"
    status = job.status()
    assert status.failed_rank == 2, status
    assert status.exit_codes[2] == 128 + 9
    assert status.message == (
        "rank 2 was killed by signal 9 (SIGKILL): a fault, and --max-restarts 0 allows no restart"
    )
    assert [r.restarts for r in status.replicas] == [0, 0]
    capsys.readouterr()
    result = shell.run_cell("%ktrain attach rank-kill")
    assert isinstance(result.error_in_exec, JobFailed)
    message = str(result.error_in_exec)
    assert "Job 'rank-kill' failed: rank 2 was killed by signal 9 (SIGKILL)" in message
    tail = message.split("Last lines of rank 2:")[1]
    assert "rank 2 step 3" in tail
    for noise in ("Root Cause", "ChildFailedError", "Traceback", "elastic", "====="):
        assert noise not in message, noise
    assert "failed before any rank reported" not in message


# -- 2. the disk full -----------------------------------------------------------------------
@pytest.fixture
def small_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real 3 MiB tmpfs as the job store."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()}): needs root")
    monkeypatch.setenv("KTRAIN_HOME", str(mount))
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_fails_the_job_with_the_reason_and_stops_it(
    shell: InteractiveShell, small_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic(
        "ktrain", "--nodes 1 --procs-per-node 2 --name full --detach", "chatter()\n"
    )
    assert job is not None
    assert job.wait(timeout=90) == "Failed"
    status = job.status()
    assert status.reason == "LogWriteFailed", status
    assert status.message.startswith("No space left on device writing "), status.message
    written = status.message.split(" writing ", 1)[1].split(":", 1)[0]
    assert written in {"node-0.log", "node-0.times", "rank-0.log", "rank-1.log"}, written
    assert f"Free space in {small_store / 'jobs'}" in status.message
    assert not marked_pids(_marker("full"))
    capsys.readouterr()
    result = shell.run_cell("%ktrain attach full")
    assert isinstance(result.error_in_exec, JobFailed)
    assert "Job 'full' failed: No space left on device writing " in str(result.error_in_exec)


# -- 3. one name, eight kernels ---------------------------------------------------------------
STARTER = """
import json, sys, time
from pathlib import Path
from IPython.core.interactiveshell import InteractiveShell
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.capture import capture
from jupyter_ktrain.errors import KtrainError
from jupyter_ktrain.spec.job import JobSpec

token, ready, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
shell = InteractiveShell.instance()
cell = f"WHO = {token!r}\\ndef show():\\n    print('kernel', WHO, flush=True)\\n"
assert shell.run_cell(cell, store_history=True).success
program = capture("show()\\n", shell.user_ns, shell.user_ns["In"], {})
backend = LocalBackend()
plan = backend.dryrun(JobSpec.create(name="same", nodes=1, procs_per_node=1), program)
ready.touch()
while not go.exists():
    time.sleep(0.001)
try:
    backend.schedule(plan)
    print(json.dumps({"won": True, "marker": plan.request.marker}))
except KtrainError as exc:
    print(json.dumps({"won": False, "error": str(exc)}))
"""


def test_eight_concurrent_starts_of_one_name_one_wins_and_no_file_of_it_is_touched(
    tmp_path: Path, ktrain_home: Path
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    tokens = [f"kernel-{i}-{secrets.token_hex(4)}" for i in range(8)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, token, str(gate / token), str(gate / "go")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for token in tokens
    ]
    try:
        _wait(lambda: all((gate / t).exists() for t in tokens), 120, "every starter ready")
    except AssertionError:
        for proc in procs:
            proc.kill()
        raise AssertionError([proc.communicate()[1][-2000:] for proc in procs]) from None
    (gate / "go").touch()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    winners = [(t, r) for t, r in zip(tokens, results, strict=True) if r["won"]]
    assert len(winners) == 1, results
    token, won = winners[0]
    for r in results:
        if not r["won"]:
            assert r["error"].startswith("A local job named 'same' already exists. Add --replace")
    # the winner's job is whole and its own: its code, its plan; it runs to the end
    job_dir = ktrain_home / "jobs" / "same"
    assert token in (job_dir / "code" / "program.py").read_text()
    assert json.loads((job_dir / "plan.json").read_text())["marker"] == won["marker"]
    job = LocalBackend().attach("same")
    assert job.wait(timeout=90) == "Succeeded", job.logs()
    assert f"[rank0]: kernel {token}" in job.logs()
    assert sorted(p.name for p in (ktrain_home / "jobs").iterdir()) == ["same"]
    # private to this user: folders 0700, files 0600
    for path in [ktrain_home, ktrain_home / "jobs", *job_dir.rglob("*"), job_dir]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


# -- 4. names that are paths ------------------------------------------------------------------
BAD_NAMES = ["../victim", "../../victim", "/etc", "a/b"]
COMMANDS = ["status", "logs", "cancel", "delete", "attach"]


@pytest.fixture
def canaries(tmp_path: Path, ktrain_home: Path) -> Iterator[list[Path]]:
    """Folders a bad name would reach from the store: they must survive every command."""
    (ktrain_home / "jobs").mkdir(parents=True)
    found = []
    for folder in (ktrain_home / "victim", tmp_path / "victim"):
        folder.mkdir()
        (folder / "state.json").write_text('{"state": "Running"}')
        (folder / "plan.json").write_text('{"marker": "x"}')
        found.append(folder)
    yield found
    for folder in found:
        assert sorted(p.name for p in folder.iterdir()) == ["plan.json", "state.json"]
    assert list((ktrain_home / "jobs").iterdir()) == []


def test_a_name_that_is_a_path_is_refused_by_every_front_end_and_touches_nothing(
    shell: InteractiveShell,
    canaries: list[Path],
    server: Server,
    capsys: pytest.CaptureFixture[str],
) -> None:
    refusal = "is not a valid job name (a DNS-1035 label)"
    for name in BAD_NAMES:
        for command in COMMANDS:
            # the notebook
            result = shell.run_cell(f"%ktrain {command} {name}")
            assert isinstance(result.error_in_exec, UsageError), (command, name)
            err = capsys.readouterr().err
            assert f"ktrain: {name!r} {refusal}" in err, err
            # the shell (in this process: the same code as the console script)
            assert ktrain_cli([command, name]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1, err
            assert f"{name!r} {refusal}" in err, err
        # the Python API
        with pytest.raises(SpecError, match="not a valid job name"):
            LocalBackend().delete(name)
        with pytest.raises(SpecError, match="not a valid job name"):
            Job(name, LocalBackend()).cancel()
    # the console script itself, with the report's own example
    env = {**os.environ}
    run = subprocess.run(
        [KTRAIN, "delete", "../../victim"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 2
    assert run.stderr == f"ktrain: '../../victim' {refusal}: use at most 63 lower-case " + (
        "letters, digits and '-', starting with a letter and ending with a letter or digit "
        "(e.g. 'bert-ft-1'). `ktrain list` shows the jobs that exist.\n"
    )
    # the side panel's REST API (the name URL-encoded, as a browser sends it)
    with server.client() as c:
        for name in BAD_NAMES:
            path = f"jobs/{quote(name, safe='')}"
            for reply in (
                c.get(path),
                c.get(f"{path}/logs"),
                c.get(f"{path}/metrics"),
                c.post(f"{path}/cancel"),
            ):
                assert reply.status_code == 400, (name, reply.status_code, reply.text)
                assert refusal in reply.json()["error"]


# -- 5. a store that cannot be written ---------------------------------------------------------
def test_a_store_under_a_file_is_one_clear_error(
    shell: InteractiveShell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's parent folder should be\n")
    monkeypatch.setenv("KTRAIN_HOME", str(blocker / "ktrain"))
    result = shell.run_cell("%%ktrain --name blocked\nhold()\n")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert (
        f"ktrain: Cannot write the local job store at {blocker / 'ktrain' / 'jobs'} (Not a "
        "directory). Point KTRAIN_HOME at a folder you can write" in err
    ), err


def test_a_read_only_store_is_one_clear_error_and_keeps_its_jobs(
    shell: InteractiveShell,
    small_store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 1 --procs-per-node 1 --name kept", "1 + 1\n")
    assert job is not None
    assert job.state == "Succeeded"
    # the same store seen through a read-only mount (as a store on a read-only share is)
    view = tmp_path / "read-only"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(small_store), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        monkeypatch.setenv("KTRAIN_HOME", str(view))
        _read_only_store_refuses_clearly(shell, view, capsys)
    finally:
        subprocess.run(["umount", "-l", str(view)], check=True)


def _read_only_store_refuses_clearly(
    shell: InteractiveShell, view: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = subprocess.run([KTRAIN, "delete", "kept"], capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(
        f"ktrain: Cannot delete a job from the local job store at {view / 'jobs' / 'kept'}"
        " (Read-only file system). Point KTRAIN_HOME at a folder you can write"
    ), run.stderr
    assert LocalBackend().status("kept").state == "Succeeded"  # still there, still readable
    capsys.readouterr()
    result = shell.run_cell("%%ktrain --name another\nhold()\n")
    assert isinstance(result.error_in_exec, UsageError)
    err = capsys.readouterr().err
    assert "(Read-only file system). Point KTRAIN_HOME at a folder you can write" in err, err
    assert "Traceback" not in err


# -- 6. --memory ------------------------------------------------------------------------------
def test_memory_flags_are_said_to_apply_on_a_cluster_only(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = "--name mem --memory 4Gi --memory-limit 8Gi --dry-run"
    shell.run_cell_magic("ktrain", flags, "hold()\n")
    out = capsys.readouterr().out
    assert (
        "note: local run: --memory, --memory-limit apply on --backend kubernetes only; nothing "
        "limits a local job's memory" in out
    ), out
    assert "# cluster-only, not used here: --memory, --memory-limit" in out
