"""Real jobs on the test cluster through the kubernetes backend, driven by %%ktrain in an
IPython shell configured with %ktrain config (kubeconfig of the test cluster)."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from .k8s_helpers import k8s_shell  # noqa: F401

pytestmark = pytest.mark.slow


def test_two_by_two_configmap_route_logs_state_and_result(k8s_shell, test_cluster, capsys):
    job = k8s_shell.run_cell_magic(
        "ktrain", "--nodes 2 --procs-per-node 2 --image local/python --name ddp-cm",
        "result = train(10)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for rank in range(4):
        assert f"[rank{rank}]: rank {rank} of 4 sum 10.0" in out
    assert k8s_shell.user_ns["result"] == 100.0
    assert job.result == 100.0
    cm = test_cluster.kubectl("get", "configmap", "ddp-cm-code", "-o", "json")
    assert cm.returncode == 0, cm.stderr
    import json

    owners = json.loads(cm.stdout)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("PyTorchJob", "ddp-cm")]
