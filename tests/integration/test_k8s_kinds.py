"""Every kind the product renders runs to Succeeded on the real controllers, from %%ktrain:
an elastic Worker-only PyTorchJob, a TFJob, an XGBoostJob training with xgboost.collective,
and a TrainJob on Trainer's own
``torch-distributed`` runtime whose volume, nodeSelector, toleration, RDMA settings and pull
secret reach its pods, and whose progress reaches ``trainerStatus``; every
rank's logs stream into the cell, every rank's ``ktrain.report`` reaches the monitor and rank 0's
result comes back. A job that asks for more GPUs
than any node has stays Pending with the scheduler's reason, and cancel leaves nothing."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("kubernetes")

from tests.cluster import Node
from tests.notebook_cells import PACED_LOOP, reported

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
    assert reported(job, "allreduced") == {0: [3.0], 1: [3.0]}
    assert k8s_shell.user_ns["result"] == 6.0


TF_TASK = """
import json, socket, time

def report_tf_task():
    config = json.loads(os.environ["TF_CONFIG"])  # all a TFJob gives its replicas
    task = config["task"]
    ktrain.report(step=1, index=float(task["index"]))
    # the chief's success ends a TFJob (a worker still running 30 s later is stopped):
    # the chief waits for its worker's word, at the worker's address in TF_CONFIG
    host, port = config["cluster"]["worker"][0].rsplit(":", 1)
    if task["type"] == "worker":
        with socket.create_server(("", int(port))) as server:
            conn, _ = server.accept()
            conn.sendall(b"done")
            conn.close()
        return 7
    deadline = time.time() + 120
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                if conn.recv(4) == b"done":
                    return 7
        except OSError:
            if time.time() > deadline:
                raise
        time.sleep(0.2)
"""


def test_tfjob(k8s_shell, capsys):
    """Each replica finds its rank in TF_CONFIG alone: the chief's report is rank 0's, the
    worker's rank 1's; the chief reaches the worker at the address TF_CONFIG gives."""
    assert k8s_shell.run_cell(TF_TASK, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind TFJob --nodes 2 --procs-per-node 1 {IMAGE} --name tf",
        "result = report_tf_task()\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert k8s_shell.user_ns["result"] == 7
    assert set(reported(job, "index")) == {0, 1}, out


XGBOOST_CELL = """
import os

import jupyter_ktrain as ktrain
import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker


def train_xgb(rounds):
    # the Training Operator's env: Master is rank 0, Worker i rank i+1
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    tracker = None
    if rank == 0:
        tracker = RabitTracker(n_workers=world, host_ip="0.0.0.0", port=port, sortby="task")
        tracker.start()
    with collective.CommunicatorContext(
        dmlc_tracker_uri=addr, dmlc_tracker_port=port, dmlc_task_id=str(rank), dmlc_retry=10
    ):
        rng = np.random.default_rng(rank)  # each worker its own shard
        x = rng.normal(size=(200, 4))
        y = (x[:, 0] + 0.1 * rng.normal(size=200) > 0).astype(int)
        params = {"objective": "binary:logistic", "tree_method": "hist", "nthread": 1}
        booster = xgb.train(params, xgb.DMatrix(x, y), rounds)
        rows = int(collective.allreduce(np.array([len(y)]), collective.Op.SUM)[0])
        trees = booster.num_boosted_rounds()
        ktrain.report(step=trees, rows=float(rows))
        print(f"xgboost rank {collective.get_rank()} of {collective.get_world_size()}: "
              f"{trees} trees on {rows} rows", flush=True)
    if tracker is not None:
        tracker.wait_for()
    return trees
"""


def test_xgboostjob_trains_with_xgboost_collective(k8s_shell, test_cluster, capsys):
    """The real XGBoost controller: a Master and two Workers, one process each under the
    agent; rank 0 runs the tracker at the operator's MASTER_ADDR:MASTER_PORT, every rank joins
    it and trains on its own shard (histograms allreduced); each rank's line reaches the cell
    and rank 0's tree count comes back."""
    pytest.importorskip("xgboost")
    assert k8s_shell.run_cell(XGBOOST_CELL, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind XGBoostJob --nodes 3 {IMAGE} --name xgb",
        "trees = train_xgb(5)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", (
        out,
        test_cluster.kubectl("get", "xgboostjob", "xgb", "-o", "yaml").stdout,
    )
    for rank in range(3):
        assert f"[rank{rank}]: xgboost rank {rank} of 3: 5 trees on 600 rows" in out, out
    assert k8s_shell.user_ns["trees"] == 5
    assert reported(job, "rows") == {0: [600.0], 1: [600.0], 2: [600.0]}
    # the operator made a Master and two Workers; each ended with its rank's exit 0 (a worker
    # still in XGBoost's collective shutdown as the master's success ended the job finishes:
    # the job is made with cleanPodPolicy None, its nodes stop each other when one fails)
    replicas = {r.name: (r.phase, r.exit_code) for r in job.status().replicas}
    assert replicas == {f"xgb-{p}": ("Succeeded", 0) for p in ("master-0", "worker-0", "worker-1")}


def test_trainjob_patches_reach_its_pods(k8s_shell, test_cluster, capsys):
    taint = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    pvc = (
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: scratch}\n"
        "spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}\n"
    )
    assert test_cluster.kubectl("apply", "-f", "-", stdin=pvc).returncode == 0
    pull = test_cluster.kubectl(
        "create",
        "secret",
        "docker-registry",
        "ngc",
        "--docker-server=nvcr.example",
        "--docker-username=u",
        "--docker-password=p",
    )
    assert pull.returncode == 0, pull.stderr
    test_cluster.rdma_network("rdma-net")
    rdma = {"rdma/rdma_shared_device_a": 100}  # the shared device plugin advertises many
    test_cluster.set_nodes([Node("trainer-0", labels={"pool": "train"}, taints=[taint], rdma=rdma)])
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind TrainJob --runtime torch-distributed --nodes 2 --procs-per-node 1 {IMAGE} "
        "--node-selector pool=train --toleration dedicated=training:NoSchedule "
        "--volume scratch=scratch:/scratch --rdma infiniband --image-pull-secret ngc "
        "--name tj --detach",
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
        # RDMA reaches a TrainJob's pods too: the Multus network, IPC_LOCK, the device resource
        assert pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
        (node,) = [c for c in spec["containers"] if c["name"] == "node"]
        assert node["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert node["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
        assert {e["name"]: e.get("value") for e in node["env"]}["NCCL_IB_HCA"] == "mlx5"
        assert spec["imagePullSecrets"] == [{"name": "ngc"}]
    final = job.wait(timeout=240)
    out = capsys.readouterr().out
    assert final == "Succeeded", (
        out,
        test_cluster.kubectl("get", "trainjob", "tj", "-o", "yaml").stdout,
    )
    assert reported(job, "allreduced") == {0: [3.0], 1: [3.0]}
    assert ns


def test_trainjob_progress_reaches_trainer_status(k8s_shell, test_cluster, capsys):
    """Trainer with its TrainJobStatus feature: rank 0 posts progress and metrics to the
    controller's status endpoint (its projected token, its CA, its Service name), so
    ``kubectl get trainjob`` shows what the notebook shows, while it runs and at the end."""
    assert k8s_shell.run_cell(PACED_LOOP, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind TrainJob --runtime torch-distributed --nodes 2 --procs-per-node 1 {IMAGE} "
        "--name tjp --detach",
        "steps = paced(30, 0.4)\n",
    )

    def trainer_status() -> dict | None:
        got = test_cluster.kubectl("get", "trainjob", "tjp", "-o", "json")
        return (json.loads(got.stdout).get("status") or {}).get("trainerStatus")

    def running() -> dict | None:
        s = trainer_status()
        return s if s and s.get("progressPercentage", 100) < 100 else None

    mid = wait_for(running, 180, 0.3)
    assert "estimatedRemainingSeconds" in mid or mid["progressPercentage"] < 20, mid
    assert job.wait(timeout=240) == "Succeeded", capsys.readouterr().out

    def finished() -> dict | None:
        s = trainer_status()
        return s if s and s.get("progressPercentage") == 100 else None

    final = wait_for(finished, 30, 0.3)
    metrics = {m["name"]: float(m["value"]) for m in final["metrics"]}
    assert (metrics["current_step"], metrics["total_steps"]) == (30, 30), final
    assert metrics["loss"] == pytest.approx(1 / 30, rel=1e-5), final
    progress = job.status().progress
    assert progress is not None
    # steps 0..29 of 30: the last step is 29, and 30 steps are done
    assert (progress.step, progress.steps_done, progress.total, progress.percent) == (
        29,
        30,
        30,
        100,
    )
    assert job.outputs["steps"] == 30  # detached: rank 0's values are read back on request


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
    assert reported(job, "allreduced") == {0: [3.0], 1: [3.0]}  # ranks mpirun started
    assert k8s_shell.user_ns["result"] == 6.0
