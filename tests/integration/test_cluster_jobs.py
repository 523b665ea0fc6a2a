"""The test cluster runs real jobs: a 2 x 2 PyTorchJob (gloo on CPU) from YAML, Kubeflow's own
``kubeflow-training`` SDK end to end, and the kubelet's restart / OOM / log semantics."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

DDP = Path(__file__).parents[1] / "data" / "cluster" / "ddp-2x2.pytorchjob.yaml"


def _wait(pred, timeout: float = 60, every: float = 0.1):
    """``pred()`` until it is true; an object not made yet (404) is not true yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = pred()
        except ApiException as exc:
            if exc.status != 404:
                raise
            value = None
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s")


@pytest.fixture
def api(test_cluster):
    return config.new_client_from_config(config_file=str(test_cluster.kubeconfig))


def _job(api, ns, name):
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "pytorchjobs", name
    )


def _last_condition(api, ns, name):
    conds = (_job(api, ns, name).get("status") or {}).get("conditions") or []
    return conds[-1]["type"] if conds else None


@pytest.mark.slow
def test_pytorchjob_2x2_gloo_runs_to_succeeded(test_cluster, api):
    r = test_cluster.kubectl("apply", "-f", str(DDP))
    assert r.returncode == 0, r.stderr
    ns = test_cluster.namespace
    _wait(lambda: _last_condition(api, ns, "ddp") in ("Succeeded", "Failed"), timeout=120)
    job = _job(api, ns, "ddp")
    assert job["status"]["conditions"][-1]["type"] == "Succeeded", job["status"]

    # success is the Master's; the worker may still be exiting when it is declared
    def succeeded() -> dict[str, int]:
        replicas = _job(api, ns, "ddp")["status"]["replicaStatuses"]
        return {k: v.get("succeeded", 0) for k, v in replicas.items()}

    want = {"Master": 1, "Worker": 1}
    _wait(lambda: succeeded() == want, timeout=30)
    v1 = client.CoreV1Api(api)
    logs = v1.read_namespaced_pod_log("ddp-master-0", ns) + v1.read_namespaced_pod_log(
        "ddp-worker-0", ns
    )
    for rank in range(4):
        assert f"rank {rank}/4 allreduce=10.0" in logs
    pod = v1.read_namespaced_pod("ddp-worker-0", ns)
    labels = pod.metadata.labels
    assert labels["training.kubeflow.org/job-name"] == "ddp"
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "0"
    assert labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "ddp-master-0"
    assert (env["RANK"], env["PET_NODE_RANK"], env["PET_NNODES"], env["PET_NPROC_PER_NODE"]) == (
        "1",
        "1",
        "2",
        "2",
    )
    assert env["WORLD_SIZE"] == "4"
    svc = v1.read_namespaced_service("ddp-master-0", ns)
    assert svc.spec.cluster_ip == "None"
    r = test_cluster.kubectl("delete", "pytorchjob", "ddp")
    assert r.returncode == 0, r.stderr
    _wait(lambda: not v1.list_namespaced_pod(ns).items, timeout=60)  # the real GC


def _train():
    import os

    print("hello from", os.environ.get("RANK", "?"), "of", os.environ.get("WORLD_SIZE", "?"))


@pytest.mark.slow
def test_kubeflow_training_sdk_create_wait_logs_delete(test_cluster):
    from kubeflow.training import TrainingClient

    tc = TrainingClient(config_file=str(test_cluster.kubeconfig), namespace=test_cluster.namespace)
    tc.create_job(
        name="sdk",
        train_func=_train,
        num_workers=2,
        num_procs_per_worker=1,
        base_image="local/python",
    )
    tc.wait_for_job_conditions(
        "sdk", expected_conditions={"Succeeded"}, timeout=120, polling_interval=1
    )
    logs, _ = tc.get_job_logs("sdk", is_master=False, follow=True)
    text = "\n".join(logs.values())
    assert "hello from 0 of 2" in text
    assert "hello from 1 of 2" in text
    tc.delete_job("sdk")
    with pytest.raises(RuntimeError):
        tc.get_job("sdk")


POD = {
    "metadata": {"name": "p", "labels": {"app": "p"}},
    "spec": {
        "restartPolicy": "OnFailure",
        "volumes": [
            {
                "name": "cfg",
                "configMap": {"name": "cfg", "items": [{"key": "a", "path": "x/a.txt"}]},
            },
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        ],
        "containers": [
            {
                "name": "main",
                "image": "local/python",
                "command": ["sh", "-c"],
                "args": [
                    "echo tok=$TOKEN a=$(cat /etc/cfg/x/a.txt) $(GREETING) host=$(getent hosts "
                    "p-svc | cut -d' ' -f1); df /dev/shm | tail -1 | cut -c1-5; "
                    "test -f /data/ran && exit 0; touch /data/ran; exit 3"
                ],
                "env": [
                    {"name": "GREETING", "value": "hi"},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
                ],
                "volumeMounts": [
                    {"name": "cfg", "mountPath": "/etc/cfg"},
                    {"name": "shm", "mountPath": "/dev/shm"},
                    {"name": "data", "mountPath": "/data"},
                ],
            }
        ],
    },
}


@pytest.mark.slow
def test_pod_env_volumes_restart_and_previous_logs(test_cluster, api):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    v1.create_namespaced_secret(ns, {"metadata": {"name": "s"}, "stringData": {"token": "t0k"}})
    v1.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"a": "A"}})
    v1.create_namespaced_persistent_volume_claim(
        ns,
        {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )
    headless = {"clusterIP": "None", "selector": {"app": "p"}}
    v1.create_namespaced_service(ns, {"metadata": {"name": "p-svc"}, "spec": headless})
    v1.create_namespaced_pod(ns, POD)
    pod = _wait(
        lambda: (p := v1.read_namespaced_pod("p", ns)).status.phase == "Succeeded" and p, 30
    )
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 3
    assert status.state.terminated.reason == "Completed"
    previous = v1.read_namespaced_pod_log("p", ns, previous=True)
    current = v1.read_namespaced_pod_log("p", ns, timestamps=True)
    # the headless Service's name is the pod's own address, as cluster DNS answers it
    assert f"tok=t0k a=A hi host={pod.status.pod_ip}" in previous, previous
    assert "tmpfs" in previous  # /dev/shm is the pod's own memory-backed emptyDir
    assert current.split(" ", 1)[0].endswith("Z")
    assert v1.read_namespaced_pod_log("p", ns, limit_bytes=5) == "tok=t"


@pytest.mark.slow
def test_oom_kill_and_exit_code_restart_policy(test_cluster, api):
    ns = test_cluster.namespace
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ec"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "ExitCode",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "local/python",
                                    "command": ["sh", "-c", 'test -n "$DONE" && exit 0; sleep 30'],
                                }
                            ]
                        }
                    },
                }
            }
        },
    }
    co = client.CustomObjectsApi(api)
    co.create_namespaced_custom_object("kubeflow.org", "v1", ns, "pytorchjobs", job)
    v1 = client.CoreV1Api(api)
    first = _wait(  # listed, not read: the operator may not have made the pod yet (404)
        lambda: next(
            (
                p
                for p in v1.list_namespaced_pod(ns).items
                if p.metadata.name == "ec-worker-0" and p.status.phase == "Running"
            ),
            None,
        )
    )
    test_cluster.faults.oom_kill(ns, "ec-worker-0")
    events = _wait(
        lambda: v1.list_namespaced_event(ns, field_selector="reason=PyTorchJobRestarting").items,
        20,
    )
    assert "is restarting because Worker replica(s) failed" in events[0].message
    second = _wait(
        lambda: (
            (p := v1.list_namespaced_pod(ns).items)
            and p[0].metadata.uid != first.metadata.uid
            and p[0]
        )
    )
    assert second.metadata.name == "ec-worker-0"


@pytest.mark.slow
def test_log_follow_cut_and_oom_killed_reason(test_cluster, api):
    v1 = client.CoreV1Api(api)
    ns = test_cluster.namespace
    pod = {
        "metadata": {"name": "ticker"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "c",
                    "image": "local/python",
                    "command": [
                        "sh",
                        "-c",
                        "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done",
                    ],
                }
            ],
        },
    }
    v1.create_namespaced_pod(ns, pod)
    _wait(lambda: v1.read_namespaced_pod("ticker", ns).status.phase == "Running")
    _wait(lambda: "tick-0" in v1.read_namespaced_pod_log("ticker", ns))
    resp = v1.read_namespaced_pod_log("ticker", ns, follow=True, _preload_content=False)
    first = next(resp.stream(16))
    assert first.startswith(b"tick-")
    test_cluster.faults.cut_logs(ns, "ticker")
    start = time.monotonic()
    rest = b"".join(resp.stream(64))  # ends although the container still runs
    assert time.monotonic() - start < 5
    assert b"tick-" in first + rest
    test_cluster.faults.oom_kill(ns, "ticker")
    final = _wait(
        lambda: (p := v1.read_namespaced_pod("ticker", ns)).status.phase == "Failed" and p
    )
    term = final.status.container_statuses[0].state.terminated
    assert (term.reason, term.exit_code) == ("OOMKilled", 137)
