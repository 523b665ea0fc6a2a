"""Ranks forked from a node's fork server (:mod:`jupyter_ktrain.pod.agent.forks`): a real
server (it imports torch once) and real rank processes started as torchrun starts them
(``python -m jupyter_ktrain.pod.runtime PROGRAM`` with ``$KTRAIN_FORK_SOCKET``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_ktrain.pod.agent.forks import FORK_SOCKET_ENV, Server, start_server

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json, os, sys, time
facts = {"pid": os.getpid(), "torch_at_start": "torch" in sys.modules,
         "forked": os.environ.get("KTRAIN_FORKED"), "rank": os.environ.get("RANK"),
         "launcher": os.environ.get("KTRAIN_LAUNCHER_PID"), "cwd": os.getcwd()}
if facts["torch_at_start"]:
    import torch
    facts["threads"] = torch.get_num_threads()
with open(os.path.join(os.path.dirname(__file__), "facts.json"), "w") as f:
    json.dump(facts, f)
print("hello from the rank", flush=True)
if os.environ.get("HOLD"):
    time.sleep(60)
sys.exit(int(os.environ.get("CODE", "0")))
"""


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "2"}
    srv = start_server(sys.executable, env)
    assert srv.warm(timeout=300), "the server did not warm"  # it starts cold
    yield srv
    srv.stop()
    assert srv.proc.returncode is not None
    assert not Path(srv.folder).exists()


def _rank(folder: Path, socket: str | None, **env: str) -> subprocess.Popen[str]:
    (folder / "program.py").write_text(PROGRAM)
    full = {**os.environ, "PYTHONPATH": str(ROOT), "RANK": "1", **env}
    if socket is not None:
        full[FORK_SOCKET_ENV] = socket
    return subprocess.Popen(
        [sys.executable, "-u", "-m", "jupyter_ktrain.pod.runtime", str(folder / "program.py")],
        env=full,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _facts(folder: Path, timeout: float = 60) -> dict[str, object]:
    path = folder / "facts.json"
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "the rank never started"
        time.sleep(0.02)
    return dict(json.loads(path.read_text()))


def _gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.02)
    return False


def test_a_rank_runs_forked_with_its_streams_environment_folder_and_exit_code(
    server: Server, tmp_path: Path
) -> None:
    rank = _rank(tmp_path, server.path, CODE="3", OMP_NUM_THREADS="1")
    out, _ = rank.communicate(timeout=120)
    assert rank.returncode == 3, out
    assert "[rank1]: hello from the rank" in out  # its output where torchrun reads it
    assert '"type":"exit","rank":1,"code":3' in out.replace(" ", "")
    facts = _facts(tmp_path)
    assert facts["torch_at_start"] is True  # torch came with the fork: not imported anew
    assert facts["forked"] is not None
    assert float(str(facts["forked"])) < 30
    assert facts["rank"] == "1"
    assert facts["cwd"] == str(tmp_path)
    assert facts["pid"] != rank.pid
    assert facts["launcher"] == str(os.getpid())  # who started the rank (torchrun, there)
    assert facts["threads"] == 1  # the rank's OMP_NUM_THREADS, not the server's


def test_a_forked_rank_killed_by_sigkill_ends_its_launched_process_the_same_way(
    server: Server, tmp_path: Path
) -> None:
    rank = _rank(tmp_path, server.path, HOLD="1")
    forked = int(str(_facts(tmp_path)["pid"]))
    os.kill(forked, signal.SIGKILL)  # the OOM killer picks the process that holds the memory
    rank.communicate(timeout=30)
    assert rank.returncode == -signal.SIGKILL  # what torchrun reports as the rank's death


def test_a_launched_process_killed_takes_its_forked_rank_with_it(
    server: Server, tmp_path: Path
) -> None:
    rank = _rank(tmp_path, server.path, HOLD="1")
    forked = int(str(_facts(tmp_path)["pid"]))
    rank.kill()  # its node stopped: what it started must not train on
    rank.communicate(timeout=30)
    assert _gone(forked), "the forked rank outlived the process torchrun started"


def test_sigterm_to_the_launched_process_reaches_the_forked_rank(
    server: Server, tmp_path: Path
) -> None:
    rank = _rank(tmp_path, server.path, HOLD="1")
    forked = int(str(_facts(tmp_path)["pid"]))
    rank.terminate()  # torchrun stopping its workers
    rank.communicate(timeout=30)
    assert rank.returncode == -signal.SIGTERM
    assert _gone(forked)


def test_without_a_server_the_rank_runs_in_its_own_process(tmp_path: Path) -> None:
    rank = _rank(tmp_path, str(tmp_path / "no.sock"))
    out, _ = rank.communicate(timeout=120)
    assert rank.returncode == 0, out
    facts = _facts(tmp_path)
    assert facts["forked"] is None
    assert facts["torch_at_start"] is False
    assert facts["pid"] == rank.pid


def test_a_cold_server_keeps_no_rank_waiting_and_warms_on_idle_cpu(tmp_path: Path) -> None:
    """The server costs the cold start nothing: the first rank finds it cold and runs in its
    own process at once (it imports torch itself, as it always did) while the server imports
    on CPU time nobody else wants; the ranks after it is warm fork from it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    srv = start_server(sys.executable, env)
    try:
        first = tmp_path / "first"
        first.mkdir()
        rank = _rank(first, srv.path)
        out, _ = rank.communicate(timeout=120)
        assert rank.returncode == 0, out
        facts = _facts(first)
        assert (facts["forked"], facts["torch_at_start"], facts["pid"]) == (None, False, rank.pid)
        assert srv.warm(timeout=300), "the server did not warm"
        again = tmp_path / "again"
        again.mkdir()
        rank = _rank(again, srv.path)
        out, _ = rank.communicate(timeout=120)
        assert rank.returncode == 0, out
        facts = _facts(again)
        assert facts["forked"] is not None, facts
        assert facts["torch_at_start"] is True, facts
    finally:
        srv.stop()


def _policies(pid: int) -> dict[int, int]:
    """Each thread of ``pid``: its scheduling policy (0 normal, 5 ``SCHED_IDLE``)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/sched").read_text()
        except OSError:
            continue  # it ended meanwhile
        for line in text.splitlines():
            if line.startswith("policy"):
                out[int(tid)] = int(line.split(":")[1])
    return out


def test_the_server_imports_on_idle_cpu_and_forks_ranks_at_normal_priority(
    tmp_path: Path,
) -> None:
    """While it warms, the server's imports run in a thread under ``SCHED_IDLE`` (they take no
    CPU the job's ranks want), its main thread, which forks the ranks, stays normal; the rank
    forked once it is warm runs at normal priority."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    srv = start_server(sys.executable, env)
    try:
        seen: dict[int, int] = {}
        deadline = time.monotonic() + 60
        while 5 not in seen.values() and time.monotonic() < deadline:
            seen.update(_policies(srv.proc.pid))
            time.sleep(0.01)
        assert seen.get(srv.proc.pid) == 0, seen
        assert 5 in seen.values(), f"no thread of the warming server ran under SCHED_IDLE: {seen}"
        assert srv.warm(timeout=300), "the server did not warm"
        folder = tmp_path / "forked"
        folder.mkdir()
        rank = _rank(folder, srv.path, HOLD="1")
        try:
            deadline = time.monotonic() + 60
            while not (folder / "facts.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            facts = json.loads((folder / "facts.json").read_text())
            assert facts["forked"] is not None, facts
            forked = int(facts["pid"])
            assert set(_policies(forked).values()) == {0}, _policies(forked)
        finally:
            rank.kill()
            rank.communicate()
    finally:
        srv.stop()


def test_a_node_command_runs_forked_from_the_warm_server(server: Server, tmp_path: Path) -> None:
    """``python -m ...forks --run MODULE ARGS`` (a restarted node's torchrun) runs the module
    as ``__main__`` forked from the warm server: torch is there before its first line; its
    exit code is the module's."""
    (tmp_path / "program.py").write_text(PROGRAM)
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "jupyter_ktrain.pod.agent.forks", "--run", "program", "x"],
        env={
            **os.environ,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}",
            "CODE": "4",
            FORK_SOCKET_ENV: server.path,
        },
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 4, out
    assert "hello from the rank" in out
    facts = _facts(tmp_path)
    assert facts["torch_at_start"] is True, facts
    assert facts["forked"] is not None, facts
    assert facts["pid"] != proc.pid
