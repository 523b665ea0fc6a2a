"""The test cluster runs a Ray job as a cluster runs it: a RayJob (1 head + 2 workers) from YAML
on the real KubeRay operator. Each pod has its own network (the workers bind the same fixed
ports), its own /tmp (each raylet its own /tmp/ray) and readiness from KubeRay's own probes, so
KubeRay submits only once every raylet is up: the driver's two 1-CPU tasks run at once, one on
each worker (the head has no CPUs), and report the workers' host names."""

from __future__ import annotations

import json
import time

import pytest

pytestmark = pytest.mark.slow

DRIVER = """\
import json, socket, time
import ray

ray.init()

@ray.remote(num_cpus=1)
def where():
    time.sleep(2)  # both tasks at once: one per worker, as each has one CPU
    return socket.gethostname()

hosts = ray.get([where.remote(), where.remote()])
alive = [n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"]]
print("RAY-SPREAD " + json.dumps({"tasks": sorted(hosts), "nodes": sorted(alive)}), flush=True)
"""

RAYJOB = {
    "apiVersion": "ray.io/v1",
    "kind": "RayJob",
    "metadata": {"name": "spread"},
    "spec": {
        "entrypoint": "python /driver/driver.py",
        "shutdownAfterJobFinishes": False,
        "rayClusterSpec": {
            "rayVersion": "2.60.0",
            "headGroupSpec": {
                "rayStartParams": {"num-cpus": "0"},
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "ray-head",
                                "image": "local/python",
                                "volumeMounts": [{"name": "driver", "mountPath": "/driver"}],
                            }
                        ],
                        "volumes": [{"name": "driver", "configMap": {"name": "driver"}}],
                    }
                },
            },
            "workerGroupSpecs": [
                {
                    "groupName": "w",
                    "replicas": 2,
                    "minReplicas": 2,
                    "maxReplicas": 2,
                    "rayStartParams": {"num-cpus": "1"},
                    "template": {
                        "spec": {"containers": [{"name": "ray-worker", "image": "local/python"}]}
                    },
                }
            ],
        },
    },
}


def _json(test_cluster, *args: str) -> dict:
    r = test_cluster.kubectl(*args, "-o", "json", admin=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(autouse=True)
def _pod_networks(test_cluster):
    """Ray's nodes bind the same fixed ports: each pod needs its own network (as root)."""
    if test_cluster.cluster.kubelet.net is None:
        pytest.skip("the test cluster runs without a network per pod (needs root, ip, nsenter)")


def test_rayjob_tasks_run_on_both_workers(test_cluster):
    driver = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "driver"},
        "data": {"driver.py": DRIVER},
    }
    for obj in (driver, RAYJOB):
        r = test_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj), admin=True)
        assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 150
    status: dict = {}
    while time.monotonic() < deadline:
        status = _json(test_cluster, "get", "rayjob", "spread").get("status") or {}
        if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
            break
        time.sleep(1)
    pods = _json(test_cluster, "get", "pods")["items"]
    names = {p["metadata"]["name"]: p for p in pods}
    submitter = [n for n, p in names.items() if "job-name" in p["metadata"].get("labels", {})]
    logs = "".join(
        test_cluster.kubectl("logs", n, "--all-containers", admin=True).stdout for n in names
    )
    assert status.get("jobStatus") == "SUCCEEDED", (status, logs)
    line = next(ln for ln in logs.splitlines() if ln.startswith("RAY-SPREAD "))
    seen = json.loads(line.removeprefix("RAY-SPREAD "))
    workers = sorted(
        n for n, p in names.items() if p["metadata"]["labels"].get("ray.io/node-type") == "worker"
    )
    (head,) = [
        n for n, p in names.items() if p["metadata"]["labels"].get("ray.io/node-type") == "head"
    ]
    assert len(workers) == 2, names
    assert seen["tasks"] == workers, seen  # one task on each worker: distinct host names
    assert len(seen["nodes"]) == 3, seen  # head and both workers joined before submission
    for name in [head, *workers]:  # every pod its own address, and Ready by its probe
        pod = names[name]
        assert pod["status"]["containerStatuses"][0]["ready"], pod["status"]
    ips = {names[n]["status"]["podIP"] for n in [head, *workers]}
    assert len(ips) == 3, ips
    assert submitter, names  # KubeRay's submitter Job ran `ray job submit`
