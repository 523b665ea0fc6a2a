"""A warm PyTorchJob on the test cluster (real kube-apiserver, Training Operator, our process
kubelet), driven by %%ktrain: runs reach the pods through the job's ConfigMap, read with a
ServiceAccount that may read that ConfigMap and nothing else. One job for the whole module's
story, so the cluster pays one cold start."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.errors import JobCancelled, JobFailed
from jupyter_ktrain.monitor.cell_error import job_error

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow

CELLS = """
import signal
SCALE = 10

def helper(x):
    return x + 1

def warm_train():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(helper(rank))])
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()} sum {t.item()} scale {SCALE}", flush=True)
    dist.destroy_process_group()
    return t.item() * SCALE

def fail_or_hang():
    rank = int(os.environ["RANK"])
    print(f"rank {rank} up", flush=True)
    if rank == 3:
        raise ValueError("no shard for rank 3")
    time.sleep(600)
"""

WARM = "--warm --nodes 2 --procs-per-node 2 --image local/python"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(CELLS, store_history=True).success
        yield sh


def _run(shell, flags=WARM, body="r = warm_train()\n"):  # type: ignore[no-untyped-def]
    return shell.run_cell_magic("ktrain", flags, body)


def _pods(test_cluster, name):  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl("get", "pods", "-l", f"ktrain.io/job={name}", "-o", "json")
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])),
        )
        for p in json.loads(got.stdout)["items"]
    }


def _can(test_cluster, name, *what):  # type: ignore[no-untyped-def]
    sa = f"system:serviceaccount:{test_cluster.namespace}:{name}-warm"
    got = test_cluster.kubectl("auth", "can-i", *what, "--as", sa, admin=True)
    return got.stdout.strip()


def test_warm_pytorchjob_runs_cells_on_the_same_pods(k8s_shell, test_cluster, capsys):
    first = _run(k8s_shell)
    assert (first.run, k8s_shell.user_ns["r"]) == (1, 100.0)
    name = first.name
    pods = _pods(test_cluster, name)
    assert len(pods) == 2
    # RBAC: the pods' ServiceAccount reads its own ConfigMap, and nothing else
    assert _can(test_cluster, name, "get", f"configmaps/{name}-code") == "yes"
    assert _can(test_cluster, name, "watch", f"configmaps/{name}-code") == "yes"
    for what in (
        ("update", f"configmaps/{name}-code"),
        ("get", "configmaps/other"),
        ("list", "configmaps"),
        ("get", "pods"),
        ("get", "secrets"),
        ("create", "pods"),
        ("get", f"pytorchjobs.kubeflow.org/{name}"),
    ):
        assert _can(test_cluster, name, *what) == "no", what
    owned = test_cluster.kubectl("get", "serviceaccount,role,rolebinding,configmap", "-o", "json")
    owners = {
        (o["kind"], o["metadata"]["name"]): [r["name"] for r in o["metadata"]["ownerReferences"]]
        for o in json.loads(owned.stdout)["items"]
        if o["metadata"]["name"].startswith(name)
    }
    assert owners == {
        (kind, f"{name}-warm"): [name] for kind in ("ServiceAccount", "Role", "RoleBinding")
    } | {("ConfigMap", f"{name}-code"): [name]}

    # a changed helper, then a changed constant: the new code, on the same pods
    assert k8s_shell.run_cell("def helper(x):\n    return x * 2\n", store_history=True).success
    second = _run(k8s_shell)
    assert (second.name, second.run, k8s_shell.user_ns["r"]) == (name, 2, 120.0)
    assert k8s_shell.run_cell("SCALE = 3\n", store_history=True).success
    third = _run(k8s_shell)
    assert (third.name, third.run, k8s_shell.user_ns["r"]) == (name, 3, 36.0)
    for run, (total, scale) in {1: (10.0, 10), 2: (12.0, 10), 3: (12.0, 3)}.items():
        for rank in range(4):
            line = f"rank {rank} of 4 sum {total} scale {scale}"
            assert third.logs(run=run, rank=rank).strip() == line
    assert (second.result, third.result) == (120.0, 36.0)
    # how much faster a warm run starts is bench/warm.py's to measure, not a test's

    out = capsys.readouterr().out
    assert f"The warm job {name!r} keeps its nodes for the next --warm cell" in out

    # a failing run (rank 3 raises, the others hang in sleep), then a good one
    result = k8s_shell.run_cell(f"%%ktrain {WARM}\nfail_or_hang()\n")
    assert isinstance(result.error_in_exec, JobFailed)
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    error = out[out.index("JobFailed: ") :]
    assert error.startswith("JobFailed: rank 3 raised ValueError: no shard for rank 3"), error
    assert "--rank 3 --run 4" in error
    again = _run(k8s_shell)
    assert (again.name, again.run, k8s_shell.user_ns["r"]) == (name, 5, 36.0)

    # a cancelled run, then a good one
    job = _run(k8s_shell, WARM + " --detach", "sleepy()\n")
    wait_for(lambda: "sleeping" in job.logs(rank=3), timeout=60)
    job.cancel()
    status = job.status()
    assert (status.state, status.reason) == ("Cancelled", "CancelledByUser")
    assert isinstance(job_error(job, status), JobCancelled)
    again = _run(k8s_shell)
    assert (again.name, again.run, k8s_shell.user_ns["r"]) == (name, 7, 36.0)

    # the job stayed Running on the same pods, none restarted
    state = test_cluster.kubectl("get", "pytorchjob", name, "-o", "json")
    conditions = json.loads(state.stdout)["status"]["conditions"]
    assert conditions[-1]["type"] == "Running"
    assert _pods(test_cluster, name) == pods

    # a shape change starts a new job and says why
    capsys.readouterr()
    other = _run(k8s_shell, "--warm --nodes 1 --procs-per-node 2 --image local/python")
    out = capsys.readouterr().out
    assert other.name != name
    assert f"the warm job {name!r} has another shape (--nodes 2 -> 1)" in out
    assert k8s_shell.user_ns["r"] == 6.0  # (2x0 + 2x1) x 3 on one node

    # --idle 0 ends it: the job and everything it owns are deleted
    k8s_shell.run_line_magic("ktrain", f"warm {other.name} --idle 0")

    def gone() -> bool:
        left = test_cluster.kubectl(
            "get", "pytorchjob,serviceaccount,role,rolebinding,configmap", "-o", "name"
        )
        return not any(other.name in line for line in left.stdout.splitlines())

    wait_for(gone, timeout=60, every=0.5)
