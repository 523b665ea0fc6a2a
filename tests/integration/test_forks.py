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
         "slow_at_start": "slow_module" in sys.modules,
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


def test_a_rank_that_asks_a_cold_server_waits_in_its_queue_and_is_forked_once_it_is_warm(
    tmp_path: Path,
) -> None:
    """The first start forks from the server too: a rank that asks while the server still
    imports waits in its queue (no timer, no import of its own) and is forked once torch and
    what every rank imports are there."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    srv = start_server(sys.executable, env)
    try:
        rank = _rank(tmp_path, srv.path)  # at once: the server is cold
        out, _ = rank.communicate(timeout=120)
        assert rank.returncode == 0, out
        facts = _facts(tmp_path)
        assert facts["forked"] is not None, (facts, out)
        assert facts["torch_at_start"] is True, facts
        assert facts["pid"] != rank.pid
        assert srv.warm(timeout=0), "forked ranks, yet not warm"
    finally:
        srv.stop()


SLOW_MODULE = """
import time
time.sleep(1.0)
"""
NODE_COMMAND = """
import json, os, sys
with open(os.path.join(os.getcwd(), "node.json"), "w") as f:
    json.dump({"torch": "torch" in sys.modules, "slow": "slow_module" in sys.modules,
               "forked": os.environ.get("KTRAIN_FORKED")}, f)
"""


def test_the_first_start_forks_after_torch_alone_and_a_later_rank_has_the_rest(
    tmp_path: Path,
) -> None:
    """torchrun and the first ranks need torch alone: they are forked as soon as the server
    has it; what every rank imports beyond it (here a slow module named in
    ``$KTRAIN_WARM_PREIMPORT``) the server imports once they are forked and no request comes,
    so a rank started later (a restart) has it for free."""
    (tmp_path / "slow_module.py").write_text(SLOW_MODULE)
    (tmp_path / "node_command.py").write_text(NODE_COMMAND)
    path = f"{tmp_path}{os.pathsep}{ROOT}"
    env = {**os.environ, "PYTHONPATH": path, "KTRAIN_WARM_PREIMPORT": "slow_module"}
    srv = start_server(sys.executable, env)
    try:
        node = subprocess.run(
            [sys.executable, "-m", "jupyter_ktrain.pod.agent.forks", "--run", "node_command"],
            env={**os.environ, "PYTHONPATH": path, FORK_SOCKET_ENV: srv.path},
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert node.returncode == 0, node.stdout + node.stderr
        seen = json.loads((tmp_path / "node.json").read_text())
        assert seen["forked"] is not None, seen
        assert (seen["torch"], seen["slow"]) == (True, False), seen
        facts = []
        for attempt in ("first", "later"):
            folder = tmp_path / attempt
            folder.mkdir()
            rank = _rank(folder, srv.path, PYTHONPATH=path)
            out, _ = rank.communicate(timeout=120)
            assert rank.returncode == 0, out
            facts.append(_facts(folder))
            time.sleep(1.5)  # a lull: the server imports the rest
        first, later = facts
        assert (first["forked"] is not None, first["torch_at_start"]) == (True, True), first
        assert first["slow_at_start"] is False, first  # it did not wait for the rest
        assert later["forked"] is not None, later
        assert later["slow_at_start"] is True, later
    finally:
        srv.stop()


def test_a_server_killed_while_a_rank_waits_in_its_queue_leaves_it_to_run_in_its_own_process(
    tmp_path: Path,
) -> None:
    """kill -9 of a server with a rank waiting in its queue (the server stopped with SIGSTOP
    first, so the rank surely waits): the rank is told nothing was forked and runs in its own
    process, as without a server."""
    srv = start_server(sys.executable, {**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        os.kill(srv.proc.pid, signal.SIGSTOP)
        rank = _rank(tmp_path, srv.path)
        time.sleep(1.0)  # it asked, and waits in the queue
        assert rank.poll() is None
        os.kill(srv.proc.pid, signal.SIGKILL)
        out, _ = rank.communicate(timeout=120)
        assert rank.returncode == 0, out
        facts = _facts(tmp_path)
        assert (facts["forked"], facts["pid"]) == (None, rank.pid), facts
        assert "fork server did not take this rank" in out, out
        assert "starts in its own process" in out, out
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
