"""A warm PyTorchJob on the test cluster (real kube-apiserver, Training Operator, our process
kubelet), driven by %%ktrain: each run is written into the job's ConfigMap and delivered by the
kernel to every pod through ``pods/exec``, signed with the job's key (Secret NAME-warm). The
pods hold no API token; no ServiceAccount, Role or RoleBinding is made, so a Kubeflow profile
user (``kubeflow-edit``: no roles) may run it. One job for the main story, so the cluster pays
one cold start there."""

from __future__ import annotations

import json
import re
import time

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.warm.orders import order_run
from jupyter_ktrain.errors import JobCancelled, JobFailed
from jupyter_ktrain.monitor.cell_error import job_error
from jupyter_ktrain.pod.agent.deliver import REFUSED, seal
from jupyter_ktrain.pod.protocol import RUN, parse_line, record_type
from tests.cluster import Rule

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
    # what a rank may reach: neither the job's key nor an API token
    key = "KTRAIN_WARM_KEY" in os.environ
    token = os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token")
    print(f"rank {rank} of {dist.get_world_size()} sum {t.item()} scale {SCALE}"
          f" key {key} token {token}", flush=True)
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


def _objects(test_cluster, name):  # type: ignore[no-untyped-def]
    """(kind, name) -> owners of what the namespace holds of job ``name``."""
    kinds = "serviceaccount,role,rolebinding,configmap,secret"
    got = test_cluster.kubectl("get", kinds, "-o", "json", admin=True)
    return {
        (o["kind"], o["metadata"]["name"]): [
            r["name"] for r in o["metadata"].get("ownerReferences") or []
        ]
        for o in json.loads(got.stdout)["items"]
        if o["metadata"]["name"].startswith(name)
    }


def _no_api_access(test_cluster, name):  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl("get", "pods", "-l", f"ktrain.io/job={name}", "-o", "json")
    for pod in json.loads(got.stdout)["items"]:
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False
        assert spec.get("serviceAccountName", "default") == "default"
        projected = [v for v in spec.get("volumes") or [] if "projected" in v]
        assert projected == [], projected  # no kube-api-access-* token volume
        for c in spec["containers"]:
            mounts = [m["mountPath"] for m in c.get("volumeMounts") or []]
            assert not any(m.startswith("/var/run/secrets") for m in mounts), mounts


def test_warm_pytorchjob_runs_cells_on_the_same_pods(k8s_shell, test_cluster, capsys):
    first = _run(k8s_shell)
    assert (first.run, k8s_shell.user_ns["r"]) == (1, 100.0)
    name = first.name
    pods = _pods(test_cluster, name)
    assert len(pods) == 2
    # no ServiceAccount, Role or RoleBinding: the job's ConfigMap and its key, owned by it
    assert _objects(test_cluster, name) == {
        ("ConfigMap", f"{name}-code"): [name],
        ("Secret", f"{name}-warm"): [name],
    }
    _no_api_access(test_cluster, name)

    # a changed helper, then a changed constant: the new code, on the same pods
    assert k8s_shell.run_cell("def helper(x):\n    return x * 2\n", store_history=True).success
    second = _run(k8s_shell)
    assert (second.name, second.run, k8s_shell.user_ns["r"]) == (name, 2, 120.0)
    assert k8s_shell.run_cell("SCALE = 3\n", store_history=True).success
    third = _run(k8s_shell)
    assert (third.name, third.run, k8s_shell.user_ns["r"]) == (name, 3, 36.0)
    for run, (total, scale) in {1: (10.0, 10), 2: (12.0, 10), 3: (12.0, 3)}.items():
        for rank in range(4):
            line = f"rank {rank} of 4 sum {total} scale {scale} key False token False"
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

    # a delivery signed with another key: every pod refuses it, no run starts
    cm = json.loads(test_cluster.kubectl("get", "configmap", f"{name}-code", "-o", "json").stdout)
    forged, _run8 = order_run(cm, cm)
    line = seal("00" * 32, f"{name}-code", forged).decode()
    for pod in pods:
        got = test_cluster.kubectl(
            "exec", "-i", pod, "-c", "pytorch", "--",
            "python", "-m", "jupyter_ktrain.pod.agent.deliver", stdin=line,
        )  # fmt: skip
        assert got.returncode == REFUSED, got
        assert "refused: the signature does not match this job's key" in got.stderr
    time.sleep(2)
    for pod in pods:
        records = [parse_line(raw) for raw in test_cluster.kubectl("logs", pod).stdout.splitlines()]
        runs = {(r.record or {}).get("run") for r in records if record_type(r.record) == RUN}
        assert max(runs) == 7, runs
    again = _run(k8s_shell)  # the next real run is run 8, on every rank
    assert (again.name, again.run, k8s_shell.user_ns["r"]) == (name, 8, 36.0)

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
        left = test_cluster.kubectl("get", "pytorchjob,configmap,secret", "-o", "name")
        return not any(other.name in line for line in left.stdout.splitlines())

    wait_for(gone, timeout=60, every=0.5)


# what Kubeflow's kubeflow-edit grants a profile's default-editor (kubeflow/manifests
# common/kubeflow-roles, with kubeflow-view and the Training Operator's aggregated role): no
# roles, no rolebindings
KUBEFLOW_EDIT = [
    Rule(("get", "list", "watch"), ("",), ("pods/attach", "pods/exec", "pods/portforward",
         "pods/proxy", "secrets", "services/proxy")),
    Rule(("create", "delete", "deletecollection", "patch", "update"), ("",),
         ("pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy")),
    Rule(("create", "delete", "deletecollection", "patch", "update"), ("",),
         ("configmaps", "endpoints", "persistentvolumeclaims", "secrets", "serviceaccounts",
          "services", "services/proxy")),
    Rule(("get", "list", "watch"), ("",),
         ("configmaps", "endpoints", "persistentvolumeclaims", "pods", "serviceaccounts",
          "services", "events", "pods/log", "pods/status")),
    Rule(("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"),
         ("kubeflow.org",), ("pytorchjobs", "pytorchjobs/status")),
]  # fmt: skip


def test_a_kubeflow_edit_user_runs_warm_jobs(k8s_shell, test_cluster):
    test_cluster.set_rbac(KUBEFLOW_EDIT)
    assert test_cluster.kubectl("auth", "can-i", "create", "roles").stdout.strip() == "no"
    flags = "--warm --nodes 2 --procs-per-node 1 --image local/python"
    first = _run(k8s_shell, flags)
    assert (first.run, k8s_shell.user_ns["r"]) == (1, 30.0)  # (1 + 2) x 10
    _no_api_access(test_cluster, first.name)
    assert k8s_shell.run_cell("def helper(x):\n    return x * 2\n", store_history=True).success
    second = _run(k8s_shell, flags)  # delivered through pods/exec, as this user
    assert (second.name, second.run, k8s_shell.user_ns["r"]) == (first.name, 2, 20.0)
    k8s_shell.run_line_magic("ktrain", f"warm {first.name} --idle 0")
