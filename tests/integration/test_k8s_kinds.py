"""Every kind the product renders runs to Succeeded on the real controllers, from %%ktrain:
an elastic Worker-only PyTorchJob, a TFJob, and a TrainJob on Trainer's own
``torch-distributed`` runtime whose volume, nodeSelector and toleration reach its pods; every
rank's logs stream into the cell and rank 0's result comes back. A job that asks for more GPUs
than any node has stays Pending with the scheduler's reason, and cancel leaves nothing."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("kubernetes")

from tests.cluster import Node

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow
IMAGE = "--image local/python"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _ranks(out: str, world: int) -> None:
    for rank in range(world):
        assert f"[rank{rank}]: rank {rank} of {world} sum {float(sum(range(1, world + 1)))}" in (
            out
        ), out


def test_elastic_worker_only_pytorchjob(k8s_shell, capsys):
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--nodes 2 --procs-per-node 1 {IMAGE} --elastic 2:2 --name elastic",
        "result = train(2)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    _ranks(out, 2)
    assert k8s_shell.user_ns["result"] == 6.0


def test_tfjob(k8s_shell, capsys):
    job = k8s_shell.run_cell_magic(
        "ktrain", f"--kind TFJob --nodes 2 --procs-per-node 1 {IMAGE} --name tf", "result = 7\n"
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert k8s_shell.user_ns["result"] == 7


def test_trainjob_patches_reach_its_pods(k8s_shell, test_cluster, capsys):
    taint = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    pvc = (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: scratch}\n"
        "spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}\n"
    )
    assert test_cluster.kubectl("apply", "-f", "-", stdin=pvc).returncode == 0
    test_cluster.set_nodes([Node("trainer-0", labels={"pool": "train"}, taints=[taint])])
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind TrainJob --runtime torch-distributed --nodes 2 --procs-per-node 1 {IMAGE} "
        "--node-selector pool=train --toleration dedicated=training:NoSchedule "
        "--volume scratch=scratch:/scratch --name tj --detach",
        "result = train(2)\n",
    )
    ns = test_cluster.namespace
    r = test_cluster.kubectl("get", "pods", "-l", "ktrain.io/job=tj", "-o", "json")
    pods = wait_for(
        lambda: json.loads(
            test_cluster.kubectl("get", "pods", "-l", "ktrain.io/job=tj", "-o", "json").stdout
        )["items"],
        60,
    )
    assert r.returncode == 0, r.stderr
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeSelector"]["pool"] == "train"
        assert any(t.get("key") == "dedicated" for t in spec["tolerations"])
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in spec["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert "scratch" in claims
        assert spec["nodeName"] == "trainer-0"
    final = job.wait(timeout=240)
    out = capsys.readouterr().out
    assert final == "Succeeded", (
        out,
        test_cluster.kubectl("get", "trainjob", "tj", "-o", "yaml").stdout,
    )
    assert ns


HOG = """
apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  containers:
  - {name: c, image: local/python, command: [sleep, "600"],
     resources: {limits: {nvidia.com/gpu: 4}}}
"""


def test_gpus_in_use_stays_pending_with_the_reason_then_cancel_leaves_nothing(
    k8s_shell, test_cluster
):
    test_cluster.set_nodes([Node("gpu-0", gpus=4)])
    r = test_cluster.kubectl("apply", "-f", "-", stdin=HOG)  # a busy cluster: every GPU taken
    assert r.returncode == 0, r.stderr
    wait_for(lambda: "Running" in test_cluster.kubectl("get", "pod", "hog").stdout, 60)
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--nodes 1 --procs-per-node 1 --gpus-per-node 4 {IMAGE} --name greedy --detach",
        "x = 1\n",
    )
    status = wait_for(lambda: (s := job.status()).reason and s, 60)
    assert status.state == "Pending"
    assert "Insufficient nvidia.com/gpu" in status.message, status
    job.cancel()
    for kind in ("pytorchjobs", "pods", "configmaps", "services"):
        wait_for(
            lambda kind=kind: (
                test_cluster.kubectl(
                    "get", kind, "-l", "ktrain.io/job=greedy", "-o", "name"
                ).stdout.strip()
                == ""
            ),
            60,
        )


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI missing (make system)")
def test_mpijob_ranks_use_torch_distributed(k8s_shell, capsys):
    """The real MPI controller: launcher `<job>-launcher`, kubectl delivered by its init
    container, mpirun reaching each worker through kubexec.sh (kubectl exec through the API
    server to the kubelet); the cell's torch.distributed all-reduce works from env://."""
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind MPIJob --nodes 2 --procs-per-node 1 {IMAGE} --name mpi",
        "result = train(2)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    _ranks(out, 2)
    assert k8s_shell.user_ns["result"] == 6.0
