"""The test cluster (the real API server, scheduler, Training Operator; our kubelet) driven by
the real kubectl: the seed manifests apply, schema violations are refused, and a pod's life
(get -w, logs -f through the kubelet API, describe, delete) reads as on any cluster."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster import Node

SEEDS = sorted((Path(__file__).parents[1] / "data" / "seed-manifests").glob("*.yaml"))


def _ns_for(manifest: Path) -> str:
    import yaml

    return yaml.safe_load(manifest.read_text())["metadata"].get("namespace", "default")


def test_apply_each_seed_manifest_with_validation(test_cluster):
    def kubectl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return test_cluster.kubectl(*args, stdin=stdin, admin=True)  # other namespaces

    r = kubectl("create", "namespace", "ai-training")
    assert r.returncode == 0 or "AlreadyExists" in r.stderr
    pvcs = "".join(
        f"---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {n}, namespace: "
        f"ai-training}}\nspec: {{accessModes: [ReadWriteMany], resources: {{requests: "
        f"{{storage: 1Gi}}}}}}\n"
        for n in ("nfsordma-datasets", "nfsordma-checkpoints")
    )
    test_cluster.set_nodes([Node(labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})])
    try:
        r = kubectl("apply", "-f", "-", stdin=pvcs)
        assert r.returncode == 0, r.stderr
        for manifest in SEEDS:
            r = kubectl("apply", "--validate=strict", "-f", str(manifest))
            assert r.returncode == 0, r.stderr
            assert "created" in r.stdout or "configured" in r.stdout
        r = kubectl("get", "pytorchjobs,tfjobs,mpijobs", "-A")
        assert r.returncode == 0, r.stderr
        for name in (
            "llm-finetune",
            "resnet-distributed-training",
            "tf-distributed",
            "horovod-training",
            "tensorflow-distributed",
        ):
            assert name in r.stdout
        # GPU pods wait Pending with the scheduler's reason
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = kubectl("describe", "pod", "llm-finetune-worker-0", "-n", "ai-training")
            if "FailedScheduling" in r.stdout:
                break
            time.sleep(0.2)
        assert "Insufficient nvidia.com/gpu" in r.stdout, r.stdout + r.stderr
        assert "training.kubeflow.org/replica-type=worker" in r.stdout
        assert "Status:           Pending" in r.stdout
        r = kubectl("apply", "-f", str(SEEDS[0]))  # second apply: patch path
        assert r.returncode == 0, r.stderr
        assert "unchanged" in r.stdout or "configured" in r.stdout
    finally:
        for manifest in SEEDS:
            kubectl("delete", "-f", str(manifest), "--wait=false")
        kubectl("delete", "namespace", "ai-training", "--wait=false")


def test_schema_violation_is_rejected_with_field_path(test_cluster, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (
            Path(__file__).parents[1]
            / "data"
            / "seed-manifests"
            / "resnet-distributed-training.pytorchjob.yaml"
        )
        .read_text()
        .replace("namespace: default", f"namespace: {test_cluster.namespace}")
    )
    worker = bad.read_text().split("    Worker:", 1)
    nameless = worker[1].replace(
        "          - name: pytorch\n            image", "          - image", 1
    )
    bad.write_text(worker[0] + "    Worker:" + nameless)  # the Worker's container has no name
    r = test_cluster.kubectl("apply", "-f", str(bad))
    assert r.returncode != 0
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name" in r.stderr
    assert "Required value" in r.stderr
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        (worker[0] + "    Worker:" + worker[1]).replace(
            "pytorchReplicaSpecs:", "notAField: 1\n  pytorchReplicaSpecs:"
        )
    )
    r = test_cluster.kubectl("create", "-f", str(unknown))
    assert r.returncode != 0
    assert 'unknown field "spec.notAField"' in r.stderr


POD = """
apiVersion: v1
kind: Pod
metadata:
  name: talker
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: local/python
    command: ["sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 0.3; done"]
"""


@pytest.mark.slow
def test_get_watch_logs_follow_describe_delete(test_cluster):
    watcher = subprocess.Popen(
        [
            str(test_cluster.kubectl_path),
            "--kubeconfig",
            str(test_cluster.kubeconfig),
            "get",
            "pods",
            "-w",
            "--request-timeout=6s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"HOME": str(test_cluster.home), "PATH": "/usr/bin:/bin"},
    )
    time.sleep(0.5)
    r = test_cluster.kubectl("apply", "-f", "-", stdin=POD)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = test_cluster.kubectl("logs", "-f", "talker")
        if r.returncode == 0:
            break
        time.sleep(0.1)
    assert r.stdout.split() == ["line-1", "line-2", "line-3"], r.stderr
    r = test_cluster.kubectl("logs", "talker", "--timestamps", "--tail=1")
    assert r.stdout.rstrip().endswith("Z line-3")
    r = test_cluster.kubectl("get", "pod", "talker")
    assert "Completed" in r.stdout
    r = test_cluster.kubectl("describe", "pod", "talker")
    assert "Exit Code:    0" in r.stdout
    assert "Started container main" in r.stdout
    out, _ = watcher.communicate(timeout=15)
    assert "talker" in out
    assert "Completed" in out
    r = test_cluster.kubectl("delete", "pod", "talker")
    assert r.returncode == 0, r.stderr
    assert 'pod "talker" deleted' in r.stdout
    assert "NotFound" in test_cluster.kubectl("get", "pod", "talker").stderr


EXEC_POD = """apiVersion: v1
kind: Pod
metadata: {name: shell}
spec:
  containers:
  - {name: main, image: busybox, workingDir: /data, env: [{name: FOO, value: bar}],
     command: [sh, -c, "echo pod-only > /data/f; exec sleep 600"],
     volumeMounts: [{name: v, mountPath: /data}]}
  volumes: [{name: v, emptyDir: {}}]
"""


@pytest.mark.parametrize("websocket", ["true", "false"])  # v5, or kubectl's SPDY fallback
def test_exec_carries_output_stdin_and_the_exit_code(test_cluster, monkeypatch, websocket):
    monkeypatch.setenv("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", websocket)
    assert test_cluster.kubectl("apply", "-f", "-", stdin=EXEC_POD).returncode == 0
    r = test_cluster.kubectl("wait", "--for=condition=Ready", "pod/shell", "--timeout=30s")
    assert r.returncode == 0, r.stderr
    r = test_cluster.kubectl(
        "exec",
        "shell",
        "-c",
        "main",
        "--",
        "sh",
        "-c",
        "echo $FOO; pwd; cat f; echo err >&2; exit 3",
    )
    assert (r.returncode, r.stdout) == (3, "bar\n/data\npod-only\n"), r.stderr
    assert "command terminated with exit code 3" in r.stderr
    r = test_cluster.kubectl("exec", "-i", "shell", "--", "tr", "a-z", "A-Z", stdin="hello\n")
    assert (r.returncode, r.stdout) == (0, "HELLO\n")
    test_cluster.kubectl("delete", "pod", "shell", "--wait=false")


def test_a_not_modified_answer_has_no_body_and_the_connection_carries_on(test_cluster):
    """kubectl revalidates its OpenAPI cache with If-None-Match; the API server answers 304,
    which has no body: the proxy in front of it must not add a chunked one (kubectl then
    reports a malformed HTTP response)."""
    import http.client
    import ssl
    from urllib.parse import urlsplit

    url = urlsplit(test_cluster.url)
    ctx = ssl.create_default_context(cafile=str(test_cluster.ca_cert))
    token = test_cluster.cluster.plane.admin_token
    conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=ctx, timeout=30)
    auth = {"Authorization": f"Bearer {token}"}
    conn.request("GET", "/openapi/v2", headers=auth)
    first = conn.getresponse()
    first.read()
    etag = first.getheader("ETag")
    assert first.status == 200
    assert etag
    conn.request("GET", "/openapi/v2", headers={**auth, "If-None-Match": etag})
    again = conn.getresponse()
    assert again.status == 304
    assert again.getheader("Transfer-Encoding") is None
    assert again.read() == b""
    conn.request("GET", "/version", headers=auth)  # the same connection: nothing left over
    after = conn.getresponse()
    assert after.status == 200
    assert b"gitVersion" in after.read()
    conn.close()
    # and kubectl, twice (the second run revalidates its cache), reads a clean answer
    for _ in range(2):
        r = test_cluster.kubectl("explain", "pytorchjobs.spec.runPolicy")
        assert r.returncode == 0, r.stderr
        assert "malformed" not in r.stderr
