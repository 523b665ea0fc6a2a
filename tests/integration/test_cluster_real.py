"""The test cluster is the real thing: the real API server and controllers answer, the real
Training Operator's webhook refuses in its own words, the real scheduler and garbage collector
act, RBAC is the real authorizer's, and faults come from the proxy in front of it all."""

from __future__ import annotations

import json
import time

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from tests.cluster import Node, Rule  # noqa: E402
from tests.cluster.build import versions  # noqa: E402

from .k8s_helpers import wait_for  # noqa: E402

GROUP, VERSION = "kubeflow.org", "v1"


@pytest.fixture
def api(test_cluster):
    return config.new_client_from_config(config_file=str(test_cluster.kubeconfig))


def _job(name: str, container: str = "pytorch", worker_cmd: str = "sleep 600") -> dict:
    def replica(cmd: str) -> dict:
        return {
            "replicas": 1,
            "restartPolicy": "Never",
            "template": {
                "spec": {
                    "containers": [
                        {"name": container, "image": "local/python", "command": ["sh", "-c", cmd]}
                    ]
                }
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {"Master": replica("sleep 600"), "Worker": replica(worker_cmd)}
        },
    }


def test_kubectl_sees_the_real_server_and_its_controllers(test_cluster):
    r = test_cluster.kubectl("version", "-o", "json", admin=True)
    assert r.returncode == 0, r.stderr
    server = json.loads(r.stdout)["serverVersion"]
    assert server["gitVersion"] == versions()["KUBE_VERSION"]
    r = test_cluster.kubectl("get", "leases", "-n", "kube-system", admin=True)
    assert r.returncode == 0, r.stderr
    assert "kube-controller-manager" in r.stdout
    assert "kube-scheduler" in r.stdout


def test_webhook_refuses_a_pytorchjob_without_a_pytorch_container(test_cluster, api):
    co = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, VERSION, test_cluster.namespace, "pytorchjobs", _job("nope", container="main")
        )
    assert exc.value.status in (400, 403, 422)
    message = json.loads(exc.value.body)["message"]
    assert (
        'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" denied' in message
    )
    assert "must have at least one container with name pytorch" in message


def test_crd_schema_rejects_with_field_path(test_cluster, api):
    co = client.CustomObjectsApi(api)
    job = _job("bad")
    del job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, VERSION, test_cluster.namespace, "pytorchjobs", job
        )
    assert exc.value.status == 422
    path = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name"
    assert path in exc.value.body
    assert "Required value" in exc.value.body
    # a value of the wrong type never reaches the schema here: Kueue's mutating webhook, which
    # sees every PyTorchJob before validation, cannot decode it (as on any cluster with Kueue)
    job = _job("bad")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(
            GROUP, VERSION, test_cluster.namespace, "pytorchjobs", job
        )
    assert exc.value.status == 400
    assert "pytorchReplicaSpecs.replicas of type int32" in exc.value.body


def test_deleting_a_job_removes_its_pods_and_services(test_cluster, api):
    co = client.CustomObjectsApi(api)
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    co.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", _job("gc"))
    sel = "training.kubeflow.org/job-name=gc"
    wait_for(lambda: len(v1.list_namespaced_pod(ns, label_selector=sel).items) == 2, 60)
    wait_for(lambda: len(v1.list_namespaced_service(ns, label_selector=sel).items) == 2, 60)
    pods = {p.metadata.name: p for p in v1.list_namespaced_pod(ns, label_selector=sel).items}
    # what the real operator does (Kubeflow's own SDK finds logs by job-role=master)
    assert pods["gc-master-0"].metadata.labels["training.kubeflow.org/job-role"] == "master"
    assert [c.name for c in pods["gc-worker-0"].spec.init_containers] == ["init-pytorch"]
    co.delete_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", "gc")
    wait_for(lambda: not v1.list_namespaced_pod(ns, label_selector=sel).items, 60)
    wait_for(lambda: not v1.list_namespaced_service(ns, label_selector=sel).items, 60)


def test_self_subject_access_review_is_the_real_authorizer(test_cluster, api):
    authz = client.AuthorizationV1Api(api)

    def allowed(verb: str, resource: str, group: str = "") -> bool:
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=test_cluster.namespace, verb=verb, resource=resource, group=group
                )
            )
        )
        return bool(authz.create_self_subject_access_review(body).status.allowed)

    assert allowed("create", "pytorchjobs", GROUP)
    test_cluster.set_rbac([Rule(verbs=("get", "list"), groups=("",), resources=("pods",))])
    wait_for(lambda: not allowed("create", "pytorchjobs", GROUP), 10)
    assert allowed("list", "pods")


def test_gpu_pod_waits_pending_with_the_schedulers_event(test_cluster, api):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    limits = {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 1}
    pod = {
        "metadata": {"name": "gpu"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["true"],
                    "resources": {"limits": limits},
                }
            ],
        },
    }
    v1.create_namespaced_pod(ns, pod)
    sel = "involvedObject.name=gpu,reason=FailedScheduling"
    events = wait_for(lambda: v1.list_namespaced_event(ns, field_selector=sel).items, 30)
    assert "Insufficient nvidia.com/gpu" in events[0].message
    assert v1.read_namespaced_pod("gpu", ns).status.phase == "Pending"
    test_cluster.set_nodes([Node("gpu-0", gpus=8, rdma={"rdma/rdma_shared_device_a": 1})])
    wait_for(lambda: v1.read_namespaced_pod("gpu", ns).status.phase == "Succeeded", 60)
    assert v1.read_namespaced_pod("gpu", ns).spec.node_name == "gpu-0"


def test_faults_429_and_500_come_from_the_proxy(test_cluster, api):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    # urllib3 (under the client) honours Retry-After on 429 by itself: one 429, then success
    test_cluster.faults.fail_next(1, 429, path="/configmaps", retry_after=1)
    start = time.monotonic()
    v1.list_namespaced_config_map(ns)
    assert time.monotonic() - start >= 0.9
    test_cluster.faults.fail_next(1, 500, path="/configmaps")
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_config_map(ns)
    assert exc.value.status == 500
    v1.list_namespaced_config_map(ns)


def test_watch_drop_and_gone(test_cluster, api):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    first = v1.create_namespaced_config_map(ns, {"metadata": {"name": "w1"}})
    rv = first.metadata.resource_version
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "w2"}})
    seen = []
    for ev in watch.Watch().stream(
        v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=5
    ):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "ADDED":
            v1.delete_namespaced_config_map("w2", ns)
        if ev["type"] == "DELETED":
            break
    assert seen == [("ADDED", "w2"), ("DELETED", "w2")]
    resp = v1.list_namespaced_config_map(ns, watch=True, timeout_seconds=30, _preload_content=False)
    import threading

    threading.Timer(1.0, test_cluster.faults.drop_watches).start()
    start = time.monotonic()
    for _ in resp.stream():
        pass
    assert time.monotonic() - start < 10  # dropped, not timed out
    test_cluster.faults.expire_resource_versions()
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(
            v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=2
        ):
            pass
    assert exc.value.status == 410
