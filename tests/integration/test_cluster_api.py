"""Fidelity of the test cluster's API server, measured by the ``kubernetes`` Python client."""

from __future__ import annotations

import threading
import time

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from tests.cluster import Node, Rule  # noqa: E402

GROUP, VERSION = "kubeflow.org", "v1"


@pytest.fixture
def api(test_cluster):
    return config.new_client_from_config(config_file=str(test_cluster.kubeconfig))


def _job(name: str, replicas: object = 1) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "pytorch", "image": "busybox", "command": ["true"]}
                            ]
                        }
                    },
                }
            }
        },
    }


def test_version_and_discovery(api):
    info = client.VersionApi(api).get_code()
    assert (info.major, info.minor) == ("1", "32")
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    assert {"kubeflow.org", "trainer.kubeflow.org", "authorization.k8s.io"} <= groups
    names = {r.name for r in client.CoreV1Api(api).get_api_resources().resources}
    assert {"pods", "pods/log", "events", "configmaps", "secrets", "services", "nodes"} <= names


def test_bad_token_is_401(test_cluster):
    cfg = client.Configuration()
    cfg.host = test_cluster.url
    cfg.ssl_ca_cert = str(test_cluster.ca_cert)
    cfg.api_key = {"authorization": "Bearer wrong"}
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(client.ApiClient(cfg)).list_namespace()
    assert exc.value.status == 401


def test_configmap_crud_conflict_and_exists(api, test_cluster):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    body = {"metadata": {"name": "cfg", "labels": {"app": "a"}}, "data": {"k": "v"}}
    cm = v1.create_namespaced_config_map(ns, body)
    with pytest.raises(ApiException) as exc:
        v1.create_namespaced_config_map(ns, body)
    assert exc.value.status == 409
    assert '"reason": "AlreadyExists"' in exc.value.body.replace('":"', '": "')
    cm.data["k"] = "v2"
    updated = v1.replace_namespaced_config_map("cfg", ns, cm)
    assert int(updated.metadata.resource_version) > int(cm.metadata.resource_version)
    cm.data["k"] = "stale"
    with pytest.raises(ApiException) as exc:
        v1.replace_namespaced_config_map("cfg", ns, cm)  # old resourceVersion
    assert exc.value.status == 409
    assert "the object has been modified" in exc.value.body
    v1.patch_namespaced_config_map("cfg", ns, {"data": {"extra": "1"}})
    got = v1.read_namespaced_config_map("cfg", ns)
    assert got.data == {"k": "v2", "extra": "1"}
    assert [
        c.metadata.name for c in v1.list_namespaced_config_map(ns, label_selector="app=a").items
    ] == ["cfg"]
    assert v1.list_namespaced_config_map(ns, label_selector="app!=a").items == []
    v1.delete_namespaced_config_map("cfg", ns)
    with pytest.raises(ApiException) as exc:
        v1.read_namespaced_config_map("cfg", ns)
    assert exc.value.status == 404


def test_generate_name_and_field_selector(api, test_cluster):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    made = v1.create_namespaced_secret(
        ns, {"metadata": {"generateName": "tok-"}, "stringData": {"a": "b"}}
    )
    assert made.metadata.name.startswith("tok-")
    assert len(made.metadata.name) == 9
    assert made.data == {"a": "Yg=="}
    found = v1.list_namespaced_secret(ns, field_selector=f"metadata.name={made.metadata.name}")
    assert [s.metadata.name for s in found.items] == [made.metadata.name]


def test_crd_schema_rejects_with_field_path_and_prunes(api, test_cluster):
    co = client.CustomObjectsApi(api)
    ns = test_cluster.namespace
    with pytest.raises(ApiException) as exc:
        co.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", _job("bad", "two"))
    assert exc.value.status == 422
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in exc.value.body
    assert "must be of type integer" in exc.value.body
    job = _job("ok")
    job["spec"]["notAField"] = 1
    created = co.create_namespaced_custom_object(GROUP, VERSION, ns, "pytorchjobs", job)
    assert "notAField" not in created["spec"]


def test_watch_resume_bookmarks_and_gone(api, test_cluster):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    first = v1.create_namespaced_config_map(ns, {"metadata": {"name": "w1"}})
    rv = first.metadata.resource_version
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "w2"}})
    w = watch.Watch()
    seen = []
    for ev in w.stream(
        v1.list_namespaced_config_map,
        ns,
        resource_version=rv,
        timeout_seconds=3,
        allow_watch_bookmarks=True,
    ):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "ADDED":
            v1.delete_namespaced_config_map("w2", ns)
        if ev["type"] == "DELETED":
            break
    assert seen == [("ADDED", "w2"), ("DELETED", "w2")]
    test_cluster.faults.expire_resource_versions()
    with pytest.raises(ApiException) as exc:
        for _ in watch.Watch().stream(
            v1.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=2
        ):
            pass
    assert exc.value.status == 410


def test_watch_bookmark_and_drop(api, test_cluster):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    resp = v1.list_namespaced_config_map(
        ns, watch=True, allow_watch_bookmarks=True, timeout_seconds=10, _preload_content=False
    )
    threading.Timer(1.6, test_cluster.faults.drop_watches).start()
    start = time.monotonic()
    lines = [line for line in resp.stream() if line.strip()]
    assert time.monotonic() - start < 8  # dropped, not timed out
    assert any(b'"BOOKMARK"' in line for line in lines)


def test_fault_429_and_500(api, test_cluster):
    v1 = client.CoreV1Api(api)
    # urllib3 (under the client) honours Retry-After on 429 by itself: one 429, then success
    test_cluster.faults.fail_next(1, 429, path="/configmaps", retry_after=1)
    start = time.monotonic()
    assert v1.list_namespaced_config_map(test_cluster.namespace).items == []
    assert time.monotonic() - start >= 0.9
    resp = api.rest_client.pool_manager  # the raw answer, without urllib3's retries
    test_cluster.faults.fail_next(1, 429, path="/configmaps", retry_after=2)
    raw = resp.request(
        "GET",
        f"{test_cluster.url}/api/v1/namespaces/{test_cluster.namespace}/configmaps",
        headers={"Authorization": f"Bearer {test_cluster.token}"},
        retries=False,
    )
    assert raw.status == 429
    assert raw.headers["Retry-After"] == "2"
    assert b'"reason": "TooManyRequests"' in raw.data
    test_cluster.faults.fail_next(1, 500)
    with pytest.raises(ApiException) as exc:
        v1.list_namespaced_config_map(test_cluster.namespace)
    assert exc.value.status == 500
    assert v1.list_namespaced_config_map(test_cluster.namespace).items == []


def test_owner_references_are_garbage_collected(api, test_cluster):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    owner = v1.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "child", "ownerReferences": [ref]}})
    v1.delete_namespaced_config_map("owner", ns, propagation_policy="Background")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and v1.list_namespaced_config_map(ns).items:
        time.sleep(0.05)
    assert v1.list_namespaced_config_map(ns).items == []


def test_self_subject_access_review_answers_from_rbac_table(api, test_cluster):
    authz = client.AuthorizationV1Api(api)

    def allowed(verb: str, resource: str, group: str = "") -> bool:
        body = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=test_cluster.namespace, verb=verb, resource=resource, group=group
                )
            )
        )
        return authz.create_self_subject_access_review(body).status.allowed

    assert allowed("create", "pytorchjobs", GROUP)
    test_cluster.set_rbac([Rule(verbs=("get", "list"), groups=("",), resources=("pods",))])
    assert allowed("list", "pods")
    assert not allowed("create", "pytorchjobs", GROUP)


def test_gpu_pod_waits_pending_with_failed_scheduling_event(api, test_cluster):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    pod = {
        "metadata": {"name": "gpu"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "command": ["true"],
                    "resources": {"limits": {"nvidia.com/gpu": 8, "rdma/rdma_shared_device_a": 1}},
                }
            ],
        },
    }
    v1.create_namespaced_pod(ns, pod)
    deadline = time.monotonic() + 5
    events = []
    while time.monotonic() < deadline and not events:
        events = v1.list_namespaced_event(
            ns, field_selector="involvedObject.name=gpu,reason=FailedScheduling"
        ).items
        time.sleep(0.05)
    assert events
    assert "Insufficient nvidia.com/gpu" in events[0].message
    assert v1.read_namespaced_pod("gpu", ns).status.phase == "Pending"
    test_cluster.set_nodes([Node("gpu-0", gpus=8, rdma={"rdma/rdma_shared_device_a": 1})])
    deadline = time.monotonic() + 10
    while (
        time.monotonic() < deadline
        and v1.read_namespaced_pod("gpu", ns).status.phase != "Succeeded"
    ):
        time.sleep(0.05)
    final = v1.read_namespaced_pod("gpu", ns)
    assert final.spec.node_name == "gpu-0"
    assert final.status.phase == "Succeeded"
