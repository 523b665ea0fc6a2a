"""``%ktrain stacks NAME`` on the test cluster: a 2-node PyTorchJob run through ``%%ktrain``,
every rank's stack asked in its pod through ``pods/exec`` (the pods hold no API right), frames
of the notebook's code named as the job's tracebacks name them; bad input is one line."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from IPython.core.error import UsageError

from tests.notebook_cells import STACKS_CELL, STACKS_STALL, STACKS_WAIT_HERE

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow

CELL = STACKS_CELL
WAIT_HERE = STACKS_WAIT_HERE
STALL = STACKS_STALL


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def test_stacks_of_every_rank_of_a_two_node_pytorchjob(k8s_shell, capsys):
    assert k8s_shell.run_cell(CELL, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 2 --procs-per-node 1 --image local/python --name stacks --detach",
        "stall(1)\n",
    )
    wait_for(lambda: all(f"rank {r} up" in job.logs() for r in range(2)), timeout=120, every=0.5)
    capsys.readouterr()
    k8s_shell.run_line_magic("ktrain", "stacks stacks")
    out = capsys.readouterr().out
    assert "Stacks of 'stacks', 2 ranks (most recent call last):" in out, out
    rank0, rank1 = out.split("\nrank 1 (pod stacks-worker-0), pid ")
    assert "\nrank 0 (pod stacks-master-0), pid " in rank0, out
    assert STALL.search(rank0), out
    assert WAIT_HERE.search(rank1), out
    assert "jupyter_ktrain" not in out
    k8s_shell.run_line_magic("ktrain", "stacks stacks --rank 1")
    one = capsys.readouterr().out
    assert "1 rank (most recent call last)" in one, one
    assert WAIT_HERE.search(one)
    assert "rank 0" not in one
    with pytest.raises(UsageError, match=r"'stacks' has ranks 0-1; there is no rank 7\."):
        k8s_shell.run_line_magic("ktrain", "stacks stacks --rank 7")
    k8s_shell.run_line_magic("ktrain", "cancel stacks")
    with pytest.raises(UsageError, match=r"ktrain: .stacks. has ended \(Cancelled\): it has no"):
        k8s_shell.run_line_magic("ktrain", "stacks stacks")
