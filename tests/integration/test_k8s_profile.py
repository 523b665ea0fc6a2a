"""``%ktrain profile NAME --steps 3`` on the test cluster: a 2-node PyTorchJob (gloo, a small
DDP model, a step reported each step) run through ``%%ktrain``, profiled in every pod through
``pods/exec`` as ``stacks`` asks; the table names real operators and a gloo all-reduce per
rank, each with its pod, and both ranks' Chrome traces are kept in the job store."""

from __future__ import annotations

import gzip
import json

import pytest

pytest.importorskip("kubernetes")

from IPython.core.error import UsageError

from jupyter_ktrain.store.profiles import read_profile, trace_file
from tests.notebook_cells import PROFILE_CELL

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def test_profile_of_every_rank_of_a_two_node_pytorchjob(k8s_shell, capsys):
    assert k8s_shell.run_cell(PROFILE_CELL, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 2 --procs-per-node 1 --image local/python --name prof --detach",
        "train_steps(100_000, 0.05)\n",
    )
    wait_for(lambda: all(f"rank {r} up" in job.logs() for r in range(2)), timeout=120, every=0.5)
    capsys.readouterr()
    k8s_shell.run_line_magic("ktrain", "profile prof --steps 3")
    out = capsys.readouterr().out
    assert out.startswith("Profile of 'prof': 2 ranks, 3 steps each (CPU time):"), out
    for rank, pod in ((0, "prof-master-0"), (1, "prof-worker-0")):
        head = f"\nrank {rank} (pod {pod}): top CPU operators, self time\n"
        assert head in out, out
        ops = out.split(head)[1].split("\n\n")[0]
        assert "  aten::addmm " in ops or "  aten::mm " in ops, ops
        assert "  gloo:all_reduce " in ops, ops
    kept = read_profile("kubernetes", "prof")
    assert kept is not None
    assert kept["traces"] == [0, 1]
    assert all(r["communication"] > 0 for r in kept["ranks"]), kept["ranks"]
    for rank in (0, 1):
        path = trace_file("kubernetes", "prof", rank)
        assert path is not None
        names = {
            e.get("name") for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        }
        assert "gloo:all_reduce" in names
    with pytest.raises(UsageError, match=r"'prof' has ranks 0-1; there is no rank 4\."):
        k8s_shell.run_line_magic("ktrain", "profile prof --steps 3 --rank 4")
    k8s_shell.run_line_magic("ktrain", "cancel prof")
    with pytest.raises(UsageError, match=r"ktrain: .prof. has ended \(Cancelled\): it has no"):
        k8s_shell.run_line_magic("ktrain", "profile prof --steps 3")
