"""A bug fails a replica with a code < 128 (not retried); a fault with one >= 128 (retried):
the pure rule, then the real agent running real torchrun ranks that raise or get kill -9.

The tests of tests/unit/test_exits.py that start processes (a unit test starts none)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.pod.exits import (
    KILLED,
)
from jupyter_ktrain.pod.launch import node_command

RANK_1 = """
import os, signal
if int(os.environ["RANK"]) == 1:
    {action}
"""


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("raise ValueError('bad batch')", 1),
        ("os.kill(os.getpid(), signal.SIGKILL)", KILLED),
        ("pass", 0),
    ],
)
def test_the_agent_exits_as_the_operator_should_treat_it(
    tmp_path: Path, action: str, expected: int
) -> None:
    (tmp_path / "program.py").write_text(RANK_1.format(action=action))
    env = {
        **os.environ,
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": "2",
        "PET_NODE_RANK": "0",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "0",
    }
    cmd = node_command(str(tmp_path), sys.executable)
    cmd.insert(cmd.index("--code-dir"), "--gpu-sampling")
    cmd.insert(cmd.index("--code-dir"), "off")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == expected, done.stdout + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith(f"[agent]: node command exited with code {expected}")
    if expected == KILLED:
        assert "rank 1 was killed" in last or "rank 0 was killed" in last


# -- an MPIJob launcher's mpirun: run again after a fault, never after a bug ----------------

FLAKY = """
import os, sys
from pathlib import Path
marker = Path(sys.argv[1])
runs = int(marker.read_text()) if marker.exists() else 0
marker.write_text(str(runs + 1))
print("[rank0]: working", flush=True)
if runs < {faults}:
    sys.exit(137)  # a worker pod lost: mpirun fails, no rank reported a bug
{bug}
print('[rank0]: @@ktrain {{"type":"exit","rank":0,"code":0}}', flush=True)
"""
BUG = """print('[rank1]: @@ktrain {"type":"exit","rank":1,"code":1}', flush=True); sys.exit(1)"""


def _launch(tmp_path: Path, faults: int, bug: str, limit: int) -> tuple[int, list[str], int]:
    import io

    from jupyter_ktrain.pod.agent.relaunch import MAX_RESTARTS_ENV, relaunch_mpirun

    script = tmp_path / "mpirun.py"
    script.write_text(FLAKY.format(faults=faults, bug=bug))
    marker = tmp_path / "runs"
    said: list[str] = []
    out = io.BytesIO()
    env = {**os.environ, MAX_RESTARTS_ENV: str(limit)}
    code = relaunch_mpirun([sys.executable, str(script), str(marker)], env, said.append, out=out)
    assert out.getvalue().count(b"[rank0]: working") == int(marker.read_text())
    return code, said, int(marker.read_text())


def test_mpirun_is_run_again_after_a_fault_and_says_so(tmp_path: Path) -> None:
    code, said, runs = _launch(tmp_path, faults=2, bug="", limit=3)
    assert (code, runs) == (0, 3)
    restarts = [s for s in said if s.startswith("restart ")]
    assert restarts[0].startswith("restart 1 of at most 3: mpirun killed by signal 9 (SIGKILL)")
    assert len(restarts) == 2
    assert sum('"type":"restart"' in s for s in said) == 2  # records the monitor counts


def test_mpirun_is_not_run_again_after_a_bug_nor_past_the_limit(tmp_path: Path) -> None:
    code, said, runs = _launch(tmp_path, faults=0, bug=BUG, limit=3)
    assert (code, runs) == (1, 1)
    assert "rank 1 failed with exit code 1: not restarted" in said[-1]
    again = tmp_path / "again"
    again.mkdir()
    code, said, runs = _launch(again, faults=5, bug="", limit=1)
    assert (code, runs) == (137, 2)
    assert "no restart is left (--max-restarts 1)" in said[-1]
