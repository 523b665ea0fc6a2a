"""One queue, several clusters, for real (Kueue's MultiKueue): the session's cluster is the
manager; a second API server (its own etcd), with its own scheduler, Kueue, Training Operator
and process kubelet, is the worker, started once for this module. The manager is set up as
Kueue's MultiKueue guide sets it up: the worker's kubeconfig in a Secret of Kueue's namespace,
a MultiKueueCluster naming it, a MultiKueueConfig, an AdmissionCheck of controller
``kueue.x-k8s.io/multikueue`` and a ClusterQueue that requires it; the worker has a
ClusterQueue and a LocalQueue of the same name. Kueue's webhook on the manager sets the
PyTorchJob's ``runPolicy.managedBy`` to MultiKueue, so the manager's Training Operator leaves it
alone and the pods run on the worker only."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kubernetes")

from IPython.core.error import UsageError

from jupyter_ktrain.backends.registry import get_backend
from jupyter_ktrain.errors import JobNotFound

from ..cluster.cluster import Cluster, Node
from ..cluster.controlplane import KUEUE_NS, NOTEBOOK_SA
from .k8s_helpers import configured_shell, panel_listing, wait_for

pytestmark = pytest.mark.slow

WORKER = "worker-east"  # the MultiKueueCluster's name
JOB = "--nodes 2 --procs-per-node 1 --image local/python --cpu 1 --kueue-queue mk"
STALL = "import time\ndef stall():\n    print('up', flush=True)\n    time.sleep(600)\n"


@pytest.fixture(scope="module")
def worker(ktrain_cluster_session: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The worker cluster, and the manager's MultiKueue objects pointing at it."""
    started = Cluster(
        tmp_path_factory.mktemp("worker"),
        nodes=[Node("worker-0")],
        shared=tmp_path_factory.getbasetemp(),
        worker=True,
    ).start()
    try:
        yield _manager_points_at(ktrain_cluster_session, started)
    finally:
        started.stop()


def _manager_points_at(manager: Cluster, started: Cluster) -> Cluster:
    """The manager's MultiKueue objects for ``started``, once Kueue has it Active."""
    kubeconfig = yaml.safe_dump(  # as Kueue requires it: the CA inline, a token
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": WORKER, "cluster": {"server": started.url,
                          "certificate-authority-data": _b64(started.ca_cert.read_bytes())}}],
            "users": [{"name": WORKER, "user": {"token": started.plane.admin_token}}],
            "contexts": [{"name": WORKER, "context": {"cluster": WORKER, "user": WORKER}}],
            "current-context": WORKER,
        }
    )  # fmt: skip
    _apply(
        manager,
        [
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{WORKER}-kubeconfig", "namespace": KUEUE_NS},
                "data": {"kubeconfig": _b64(kubeconfig.encode())},
            },
            _kueue("MultiKueueCluster", WORKER, {"clusterSource": {"kubeConfig": {
                "locationType": "Secret", "location": f"{WORKER}-kubeconfig"}}}),
            _kueue("MultiKueueConfig", "mk", {"clusters": [WORKER]}),
            _kueue("AdmissionCheck", "mk", {"controllerName": "kueue.x-k8s.io/multikueue",
                   "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                  "name": "mk"}}),
        ],
    )  # fmt: skip

    def active() -> bool:
        got = json.loads(manager.plane.kubectl("get", "multikueueclusters", WORKER, "-o", "json"))
        conds = (got.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Active" and c["status"] == "True" for c in conds)

    wait_for(active, 60, 0.5)
    return started


def _secret_readers(ns: str) -> list[dict[str, Any]]:
    """RBAC that lets the namespace's notebook account read the worker's MultiKueueCluster
    and, in Kueue's namespace, its kubeconfig Secret (that one only)."""
    rbac = "rbac.authorization.k8s.io/v1"
    who = [{"kind": "ServiceAccount", "name": NOTEBOOK_SA, "namespace": ns}]
    name = f"{ns}-mk-secret"
    return [
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name},
         "rules": [{"apiGroups": ["kueue.x-k8s.io"], "resources": ["multikueueclusters"],
                    "verbs": ["get"], "resourceNames": [WORKER]}]},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": name}, "subjects": who},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": name, "namespace": KUEUE_NS},
         "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                    "resourceNames": [f"{WORKER}-kubeconfig"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": KUEUE_NS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": who},
    ]  # fmt: skip


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _kueue(kind: str, name: str, spec: dict[str, Any], ns: str = "") -> dict[str, Any]:
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec}


def _apply(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": objects}
    cluster.plane.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(listed))


def _queues(cluster: Cluster, ns: str, check: bool) -> None:
    """A ClusterQueue (requiring the MultiKueue check, on the manager) and LocalQueue ``mk``."""
    quota = [{"name": "cpu", "nominalQuota": "4"}, {"name": "memory", "nominalQuota": "64Gi"}]
    cq: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                            "flavors": [{"name": "default-flavor", "resources": quota}]}],
    }  # fmt: skip
    if check:
        cq["admissionChecksStrategy"] = {"admissionChecks": [{"name": "mk"}]}
    _apply(
        cluster,
        [
            _kueue("ResourceFlavor", "default-flavor", {}),
            _kueue("ClusterQueue", f"{ns}-mk", cq),
            _kueue("LocalQueue", "mk", {"clusterQueue": f"{ns}-mk"}, ns),
        ],
    )


def _kubeconfig(path: Path, manager: Path, worker: Cluster, ns: str) -> Path:
    """The notebook user's kubeconfig with a second context, ``east``, for the worker."""
    cfg = yaml.safe_load(manager.read_text())
    cfg["clusters"].append({"name": "east", "cluster": {"server": worker.url,
                            "certificate-authority": str(worker.ca_cert)}})  # fmt: skip
    cfg["users"].append({"name": "east", "user": {"token": worker.plane.notebook_token(ns)}})
    cfg["contexts"].append(
        {"name": "east", "context": {"cluster": "east", "user": "east", "namespace": ns}}
    )
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture
def mk_shell(test_cluster, worker, tmp_path, monkeypatch):
    ns = test_cluster.namespace
    worker.create_namespace(ns)
    _queues(test_cluster.cluster, ns, check=True)
    _queues(worker, ns, check=False)
    test_cluster.kubeconfig = _kubeconfig(
        tmp_path / "two.kubeconfig", test_cluster.kubeconfig, worker, ns
    )
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)
    worker.plane.kubectl("delete", "clusterqueue", f"{ns}-mk", "--wait=false", check=False)
    worker.delete_namespace(ns, wait=False)


def _status(name: str) -> Any:
    try:
        return get_backend("kubernetes").attach(name).status()
    except JobNotFound:
        return None


def _pods(cluster: Cluster, ns: str, job: str) -> list[dict[str, Any]]:
    got = cluster.plane.kubectl(
        "get", "pods", "-n", ns, "-l", f"training.kubeflow.org/job-name={job}", "-o", "json"
    )
    return list(json.loads(got)["items"])


def test_a_job_on_a_multikueue_queue_runs_on_the_worker_and_is_followed_there(
    mk_shell, test_cluster, worker, capsys
):
    ns = test_cluster.namespace
    # bad input: one line each, before anything is created
    for pairs, said in (
        ("nowhere=east", "'nowhere' is not a MultiKueueCluster of this cluster"),
        (f"{WORKER}=west", f"{WORKER}=west: the kubeconfig has no context 'west'"),
    ):
        mk_shell.run_line_magic("ktrain", f"config clusters={pairs}")
        with pytest.raises(UsageError) as refused:
            mk_shell.run_cell_magic("ktrain", f"{JOB} --name bad", "x = 1\n")
        (line,) = [ln for ln in str(refused.value).splitlines() if "clusters:" in ln]
        assert said in line, line
    made = test_cluster.kubectl("get", "pytorchjobs,configmaps", "-l", "ktrain.io/job=bad")
    assert made.stdout.strip() == "", made.stdout

    # followed on the worker: the cell's state, every rank's lines, the panel's list
    mk_shell.run_line_magic("ktrain", f"config clusters={WORKER}=east")
    with panel_listing("mk1") as listed:
        job = mk_shell.run_cell_magic("ktrain", f"{JOB} --name mk1", "steps(3, 0.1)\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for rank in (0, 1):
        assert f"rank {rank} step 2" in out, out
    assert f"on cluster '{WORKER}'" in out, out
    assert any(f"on cluster '{WORKER}'" in m for _s, m in listed), listed
    # it ran there, not here: the manager's Training Operator left it to MultiKueue
    assert not _pods(test_cluster.cluster, ns, "mk1")
    got = json.loads(test_cluster.kubectl("get", "pytorchjob", "mk1", "-o", "json").stdout)
    assert got["spec"]["runPolicy"]["managedBy"] == "kueue.x-k8s.io/multikueue", got["spec"]
    wl = json.loads(test_cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-o", "json").stdout)
    assert [w["status"].get("clusterName") for w in wl["items"]] == [WORKER], wl

    # a running one: logs, stacks and cancel reach it on the worker
    assert mk_shell.run_cell(STALL, store_history=True).success
    running = mk_shell.run_cell_magic("ktrain", f"{JOB} --name mk2 --detach", "stall()\n")
    wait_for(lambda: running.logs().count("up") >= 2, 90, 0.5)
    assert len(_pods(worker, ns, "mk2")) == 2
    capsys.readouterr()
    mk_shell.run_line_magic("ktrain", "logs mk2")
    logs = capsys.readouterr().out
    assert logs.count("up") >= 2, logs
    mk_shell.run_line_magic("ktrain", "stacks mk2")
    stacks = capsys.readouterr().out
    assert "Stacks of 'mk2', 2 ranks" in stacks, stacks
    assert "stall" in stacks, stacks

    # no context named, but the user may read the worker's MultiKueueCluster and its Secret
    # (a Role the cluster's admin gave): reached through the kubeconfig Kueue itself uses
    mk_shell.run_line_magic("ktrain", "config clusters=")
    _apply(test_cluster.cluster, _secret_readers(ns))
    try:
        capsys.readouterr()
        mk_shell.run_line_magic("ktrain", "logs mk2")
        logs = capsys.readouterr().out
        assert logs.count("up") >= 2, logs
        assert "cannot be reached" not in logs, logs
        mk_shell.run_line_magic("ktrain", "cancel mk2")
        wait_for(lambda: not _pods(worker, ns, "mk2"), 60, 0.5)
    finally:
        for obj in _secret_readers(ns):
            kind, name = obj["kind"].lower(), obj["metadata"]["name"]
            where = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
            test_cluster.cluster.plane.kubectl("delete", kind, name, *where, check=False)
    done = _status("mk2")
    assert done is not None
    assert done.state == "Cancelled", done

    # a user whose kubeconfig does not reach the worker: told once, shown the manager's mirror
    capsys.readouterr()
    mk_shell.run_line_magic("ktrain", "status mk1")
    out = capsys.readouterr().out
    told = [ln for ln in out.splitlines() if "cannot be reached from here" in ln]
    assert len(told) == 1, out
    assert f"runs on cluster '{WORKER}' (MultiKueue)" in told[0], told
    assert "Succeeded" in out, out
