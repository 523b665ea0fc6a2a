"""An MPIJob's launcher command, run here with a real Open MPI ``mpirun``: two ranks, each
started through the agent and the runtime, meet with ``torch.distributed`` over ``env://``
(gloo) although mpirun gives them only ``OMPI_*`` variables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.pod.launch import node_command
from jupyter_ktrain.pod.protocol import METRIC, format_record, parse_line, record_type

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI (openmpi-bin) missing"),
]

PROGRAM = """
import os
import torch
import torch.distributed as dist
import jupyter_ktrain as ktrain
from jupyter_ktrain.pod.cell import run_cell

def train():
    dist.init_process_group("gloo")  # env:// with nothing but what the runtime derived
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    where = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], os.environ["LOCAL_RANK"]
    print(f"rank {rank} of {dist.get_world_size()} sum {t.item()} via {where}", flush=True)
    ktrain.report(step=1, allreduced=t.item())
    dist.destroy_process_group()
    return t.item()

_KTRAIN_RESULT_NAMES = ["total"]
run_cell("total = train()", globals())
"""


def test_two_mpirun_ranks_all_reduce_over_env_init(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "program.py").write_text(PROGRAM)
    (code / "requirements.txt").write_text(f"torch=={_version('torch')}\n")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")  # the MPI controller's shape: HOST slots=N
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "MASTER_", "RANK"))}
    env["OMPI_MCA_orte_default_hostfile"] = str(hostfile)  # what the controller sets
    env["MASTER_PORT"] = str(_free_port())
    argv = node_command(str(code), sys.executable, launcher="mpirun", processes=2)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    port = env["MASTER_PORT"]
    for rank in (0, 1):
        want = f"[rank{rank}]: rank {rank} of 2 sum 3.0 via ('127.0.0.1', '{port}', '{rank}')"
        assert want in out
        exit_line = f"[rank{rank}]: " + format_record({"type": "exit", "rank": rank, "code": 0})
        assert exit_line in out
    assert out.count('"type":"result"') == 1  # rank 0 alone sends the result back
    metrics = [(p.rank, p.record) for p in map(parse_line, out.splitlines())
               if record_type(p.record) == METRIC]  # fmt: skip
    assert sorted((r, rec["rank"], rec["allreduced"]) for r, rec in metrics) == [
        (0, 0, 3.0),
        (1, 1, 3.0),
    ]
    assert '[rank0]: @@ktrain {"type":"result"' in out
    # the launcher's agent found rank 0's host; an agent ran with each rank (requirements)
    assert f"[agent]: rank 0 runs on localhost: MASTER_ADDR=127.0.0.1 MASTER_PORT={port}" in out
    # an agent ran with each rank (and the launcher): three say how their command ended; with
    # everything already installed, none of them says a word about requirements
    assert out.count("[agent]: node command exited with code 0") == 3
    assert "requirement" not in out.lower()


def _version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
