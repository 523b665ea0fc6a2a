"""Preflight on the test cluster: each problem is found before anything is created, one line
each, saying what is missing and what fixes it; several problems are reported together."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from IPython.core.error import UsageError

pytest.importorskip("kubernetes")

from tests.cluster import Node, Rule

from .k8s_helpers import configured_shell, wait_for

BASE = "--nodes 2 --procs-per-node 1 --image local/python --name pf"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _refused(shell, test_cluster, flags: str) -> list[str]:
    with pytest.raises(UsageError) as info:
        shell.run_cell_magic("ktrain", f"{BASE} {flags}", "x = 1\n")
    text = str(info.value)
    assert "cannot run this job" in text, text
    for kind in ("configmaps", "pytorchjobs", "pods"):
        if kind == "pytorchjobs" and "--kind MPIJob" in flags:
            continue
        got = test_cluster.kubectl("get", kind, "-o", "name")
        made = [n for n in got.stdout.split() if n != "configmap/kube-root-ca.crt"]  # the KCM's
        assert made == [], f"{kind} created despite preflight: {got.stdout}"
    return [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ")]


@contextlib.contextmanager
def _without_crd(test_cluster, name: str, manifest: str, gone: Callable[[], bool]):
    """The CRD ``name`` deleted (as on a cluster without that component) until the block
    ends, then applied again from ``manifest`` (under the cluster's manifests)."""
    deleted = test_cluster.kubectl("delete", "crd", name, admin=True)
    assert deleted.returncode == 0, deleted.stderr
    wait_for(gone, 30)  # discovery follows the deletion a moment later
    try:
        yield
    finally:
        crd = test_cluster.cluster.plane.manifests / manifest
        back = test_cluster.kubectl("apply", "--server-side", "-f", str(crd), admin=True)
        assert back.returncode == 0, back.stderr


def test_missing_crd_names_the_operator(k8s_shell, test_cluster):
    with _without_crd(
        test_cluster,
        "mpijobs.kubeflow.org",
        "training-operator/base/crds/kubeflow.org_mpijobs.yaml",
        lambda: (
            "mpijobs" not in test_cluster.kubectl("get", "--raw", "/apis/kubeflow.org/v1").stdout
        ),
    ):
        (problem,) = _refused(k8s_shell, test_cluster, "--kind MPIJob")
        assert "does not serve MPIJob (mpijobs.kubeflow.org/v1)" in problem
        assert "Training Operator" in problem


def test_missing_namespace_is_one_sentence(k8s_shell, test_cluster):
    # the notebook's user has a Role in its own namespace only: in another one every
    # permission is denied too, and that is not thirteen problems but one
    (problem,) = _refused(k8s_shell, test_cluster, "--namespace nowhere")
    assert "namespace 'nowhere'" in problem
    assert "does not exist" in problem
    assert "--namespace" in problem


def test_missing_namespace_seen_by_an_admin_says_how_to_create_it(test_cluster, tmp_path):
    from jupyter_ktrain.backends.kubernetes.client.kube_api import Api
    from jupyter_ktrain.backends.kubernetes.plans.preflight import run_preflight
    from jupyter_ktrain.errors import PreflightError
    from jupyter_ktrain.spec.job import JobSpec

    admin = Api.connect(str(test_cluster.cluster.admin_kubeconfig(tmp_path / "admin")), None)
    spec = JobSpec.create(name="pf", nodes=2, image="local/python", namespace="nowhere")
    with pytest.raises(PreflightError) as info:
        run_preflight(admin, spec, "nowhere", configmap=True)
    (problem,) = info.value.problems
    assert problem.startswith("namespace 'nowhere' does not exist")
    assert "kubectl create namespace nowhere" in problem


def test_rbac_denial_says_verb_and_resource(k8s_shell, test_cluster):
    test_cluster.set_rbac(
        [
            Rule(resources=("configmaps", "pods", "pods/log", "events")),
            Rule(verbs=("get", "list", "watch"), resources=("pytorchjobs",)),
        ]
    )
    problems = _refused(k8s_shell, test_cluster, "")
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        f"RBAC: you may not create pytorchjobs.kubeflow.org in namespace '{test_cluster.namespace}'"
    )
    assert "--verb=create --resource=pytorchjobs.kubeflow.org" in problems[0]


def test_rbac_denial_of_pod_logs(k8s_shell, test_cluster):
    test_cluster.set_rbac([Rule(resources=("configmaps", "pods", "events", "pytorchjobs"))])
    (problem,) = _refused(k8s_shell, test_cluster, "")
    assert "you may not get pods/log" in problem


def test_missing_pvc(k8s_shell, test_cluster):
    (problem,) = _refused(k8s_shell, test_cluster, "--dataset imagenet:/data:ro")
    assert "PersistentVolumeClaim 'imagenet' (from --dataset imagenet:/data) does not exist" in (
        problem
    )


def test_missing_secret(k8s_shell, test_cluster):
    (problem,) = _refused(k8s_shell, test_cluster, "--secret-env HF_TOKEN=hf/token")
    assert "Secret 'hf' (from --secret-env HF_TOKEN=hf/token) does not exist" in problem


def test_secret_without_the_key_lists_its_keys(k8s_shell, test_cluster):
    r = test_cluster.kubectl("create", "secret", "generic", "hf", "--from-literal=other=x")
    assert r.returncode == 0, r.stderr
    (problem,) = _refused(k8s_shell, test_cluster, "--secret-env HF_TOKEN=hf/token")
    assert "Secret 'hf' has no key 'token'" in problem
    assert "its keys: other" in problem
    assert "x" not in problem.split("its keys: other")[1].split(")")[0]  # never a value


def test_missing_image_pull_secret(k8s_shell, test_cluster):
    (problem,) = _refused(k8s_shell, test_cluster, "--image-pull-secret regcred")
    assert "Secret 'regcred' (from --image-pull-secret regcred) does not exist" in problem


def test_no_node_advertises_gpus(k8s_shell, test_cluster):
    (problem,) = _refused(k8s_shell, test_cluster, "--gpus-per-node 8")
    assert "no node advertises nvidia.com/gpu" in problem


def test_not_enough_allocatable_for_all_replicas(k8s_shell, test_cluster):
    test_cluster.set_nodes([Node("gpu-0", gpus=8), Node("gpu-1", gpus=4)])
    (problem,) = _refused(k8s_shell, test_cluster, "--gpus-per-node 8 --procs-per-node 1")
    assert "only 1 of 2 replicas fit" in problem


def test_rdma_resource_missing(k8s_shell, test_cluster):
    test_cluster.rdma_network("rdma-net")
    test_cluster.set_nodes([Node("gpu-0", gpus=8), Node("gpu-1", gpus=8)])
    (problem,) = _refused(k8s_shell, test_cluster, "--gpus-per-node 8 --rdma infiniband")
    assert "no node advertises rdma/" in problem


def test_rdma_network_missing_is_named_before_pods_wait_in_container_creating(
    k8s_shell, test_cluster, tmp_path
):
    rdma = {"rdma/rdma_shared_device_a": 8}
    test_cluster.set_nodes([Node("gpu-0", gpus=8, rdma=rdma), Node("gpu-1", gpus=8, rdma=rdma)])
    test_cluster.rdma_network("roce-net")  # there is a network, not the one the profile names
    (problem,) = _refused(k8s_shell, test_cluster, "--gpus-per-node 8 --rdma infiniband")
    assert problem.startswith("NetworkAttachmentDefinition 'rdma-net' (the Multus network of ")
    assert f"does not exist in '{test_cluster.namespace}'" in problem
    assert "kubectl get network-attachment-definitions -A" in problem
    # a profile naming the network there is (in another namespace too, as NS/NAME) is accepted
    profile = tmp_path / "roce.yaml"
    shared = f"{test_cluster.namespace}/roce-net"
    profile.write_text(
        "name: roce\nenv: {NCCL_IB_HCA: mlx5}\nnetworks: " + shared + "\n"
        "resource: rdma/rdma_shared_device_a\nresource_count: 1\nipc_lock: true\n"
    )
    job = k8s_shell.run_cell_magic(
        "ktrain", f"{BASE} --gpus-per-node 8 --rdma {profile}", "x = 1\n"
    )
    assert job.state == "Succeeded"
    assert k8s_shell.user_ns["x"] == 1


def test_rdma_without_multus_says_it_is_not_installed(k8s_shell, test_cluster):
    with _without_crd(
        test_cluster,
        "network-attachment-definitions.k8s.cni.cncf.io",
        "multus/networks-crd.yaml",
        lambda: test_cluster.kubectl("get", "--raw", "/apis/k8s.cni.cncf.io/v1").returncode != 0,
    ):
        rdma = {"rdma/rdma_shared_device_a": 8}
        test_cluster.set_nodes([Node("gpu-0", gpus=8, rdma=rdma), Node("gpu-1", gpus=8, rdma=rdma)])
        (problem,) = _refused(k8s_shell, test_cluster, "--gpus-per-node 8 --rdma roce")
        assert "does not serve NetworkAttachmentDefinitions (Multus is not installed)" in problem
        assert "--rdma tcp" in problem


def test_volcano_queue_missing(k8s_shell, test_cluster):
    (problem,) = _refused(k8s_shell, test_cluster, "--gang volcano --queue research")
    assert "Volcano queue 'research' (--queue) does not exist" in problem


def test_kueue_local_queue_missing(k8s_shell, test_cluster):
    (problem,) = _refused(k8s_shell, test_cluster, "--kueue-queue team-a")
    assert "Kueue LocalQueue 'team-a' (--kueue-queue) does not exist" in problem


def test_every_problem_reported_together(k8s_shell, test_cluster):
    test_cluster.set_rbac([Rule(verbs=("get", "list", "watch"))])
    problems = _refused(
        k8s_shell,
        test_cluster,
        "--dataset data:/data --secret-env A=s/k --gpus-per-node 2 --kueue-queue q",
    )
    text = "\n".join(problems)
    for needle in ("create pytorchjobs", "create configmaps", "'data'", "Secret 's'", "gpu", "q'"):
        assert needle in text, text
