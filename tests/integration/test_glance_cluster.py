"""A 32-rank job on the test cluster (4 pods of 8 ranks, on 4 nodes of 8 GPUs) through
``%%ktrain``: the cell follows it to the end, and the side panel's API shows its GPUs as one
heatmap per field and starts its log with rank 0 and the ranks that warned or failed, every
rank's lines still reachable (:mod:`tests.integration.glance_checks`; the widget and the
panel in Chromium: tests/browser/test_glance_browser.py)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.config import load_config
from jupyter_ktrain.server.core import PanelCore
from tests.cluster import Node

from .glance_checks import GLANCE_CELL, GPUS, panel_sees_a_big_job
from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow

NODES, PER_NODE = 4, 8


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def test_a_32_rank_job_is_one_heatmap_and_a_log_of_the_ranks_that_matter(
    k8s_shell, test_cluster, capsys
):
    test_cluster.set_nodes([Node(f"gpu-{k}", gpus=GPUS) for k in range(NODES)])
    assert k8s_shell.run_cell(GLANCE_CELL, store_history=True).success
    began = time.monotonic()
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--nodes {NODES} --procs-per-node {PER_NODE} --gpus-per-node {GPUS} "
        "--image local/python --name glance",
        "rank = glance(3)\n",
    )
    took = time.monotonic() - began
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    print(f"32 ranks on the test cluster: {took:.1f} s from the cell to Succeeded")
    for rank in range(NODES * PER_NODE):
        assert f"[rank{rank}]: rank {rank} at step 2" in out, rank
    panel = PanelCore({"kubernetes": lambda: KubernetesBackend(load_config())})
    payload = panel_sees_a_big_job(panel, "glance", NODES, NODES * PER_NODE)
    names = [row["name"] for row in payload["heatmaps"][0]["rows"]]
    assert names == ["pod glance-master-0", *(f"pod glance-worker-{k}" for k in range(3))]
