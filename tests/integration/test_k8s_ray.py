"""A cell as a RayJob on the real KubeRay operator, on the stand-in kubelet: a task that raises
fails the cell with the task's own traceback, read from KubeRay's submitter pod (whose log is
the driver's output). Each pod has its own network (Ray's nodes bind the same fixed ports).

A RayJob that succeeds (tasks spread over the head and a worker, reports from inside them, the
driver's result, KubeRay's pods and probes) runs on the real node: test_real_node.py."""

from __future__ import annotations

import pytest

from jupyter_ktrain.errors import JobFailed

pytest.importorskip("kubernetes")
pytest.importorskip("ray")

from tests.notebook_cells import RAY_CELL

from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def _pod_networks(test_cluster):
    """Ray's nodes bind the same fixed ports: each pod needs its own network (as root)."""
    if test_cluster.cluster.kubelet.net is None:
        pytest.skip("the test cluster runs without a network per pod (needs root, ip, nsenter)")


def test_a_task_that_raises_fails_the_cell_with_its_traceback(k8s_shell, capsys):
    assert k8s_shell.run_cell(RAY_CELL, store_history=True).success
    with pytest.raises(JobFailed) as info:
        k8s_shell.run_cell_magic(
            "ktrain", "--kind RayJob --nodes 1 --image local/python --name ray-bad", "failing()\n"
        )
    error, out = str(info.value), capsys.readouterr().out
    assert "RayTaskError(ValueError)" in error, (error, out)
    assert "ValueError: shard 3 is empty" in error, (error, out)  # the task's own traceback
