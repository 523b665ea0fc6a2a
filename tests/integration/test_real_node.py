"""Jobs on a real node: the kubelet of the cluster's release, containerd 2.x and Debian's runc,
kube-proxy and CoreDNS (``tests/cluster/realnode.py``), running the image our packager makes
(a code layer appended to a debootstrap Debian + Python base, ``tests/cluster/node_images.py``).
Every job here tolerates the node's taint and selects its label; everything is read back with
kubectl. The node starts once for this module; its last test stops it and checks that this
machine is left as it was found."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from tests.cluster import realnode
from tests.cluster.realnode import LABEL, RealNode, machine_state

from .k8s_helpers import configured_shell, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
ON_NODE = f"--node-selector {LABEL}=true --toleration {LABEL}=true:NoSchedule"

CELLS = """
import os, sys, time, signal

def where():
    print(f"interpreter {sys.executable} {sys.version.split()[0]}", flush=True)
    return sys.executable
"""


@dataclass
class NodeHandle:
    node: RealNode
    base: str  # HOST/base/debian-python:1 in the test registry
    registry: str
    before: dict[str, Any]  # machine_state() before the node started


@pytest.fixture(scope="module")
def real_node(ktrain_cluster_session, registry, tmp_path_factory) -> Iterator[NodeHandle]:  # type: ignore[no-untyped-def]
    reason = realnode.unavailable()
    if reason:
        pytest.skip(reason)
    from tests.cluster.node_images import base_images, push_layout

    images = base_images()
    pause = push_layout(images / "pause", registry.host, "ktrain/pause", "1")
    base = push_layout(images / "debian-python", registry.host, "base/debian-python", "1")
    before = machine_state()
    node = RealNode(
        ktrain_cluster_session.plane, tmp_path_factory.mktemp("real-node"), registry.host, pause
    )
    node.start()
    try:
        yield NodeHandle(node, base, registry.host, before)
    finally:
        node.stop()


@pytest.fixture
def shell(test_cluster, real_node, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(CELLS).success
        host = real_node.registry
        sh.run_line_magic(
            "ktrain", f"config registry={host}/ktrain/code base_image={real_node.base}"
        )
        yield sh


def _pod(name: str, image: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {LABEL: "true"},
            "tolerations": [{"key": LABEL, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": image, "command": ["python", "-c", script]}],
        },
    }


def _phase(test_cluster, pod: str) -> str:  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}")
    return str(got.stdout)


def test_node_is_real_tainted_and_pods_find_services_by_name(real_node, test_cluster):
    node = json.loads(
        test_cluster.kubectl("get", "node", real_node.node.name, "-o", "json", admin=True).stdout
    )
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    assert node["spec"]["taints"] == [realnode.TAINT]
    assert node["metadata"]["labels"][LABEL] == "true"
    script = (
        "import socket, sys\n"
        "ip = socket.gethostbyname('kubernetes.default.svc.cluster.local')\n"
        "socket.create_connection((ip, 443), timeout=10).close()\n"
        "print('kubernetes at', ip, 'reached', flush=True)\n"
        "print('interpreter', sys.executable, sys.version.split()[0], flush=True)\n"
    )
    pod = _pod("probe", real_node.base, script)
    done = test_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    assert done.returncode == 0, done.stderr
    wait_for(lambda: _phase(test_cluster, "probe") in ("Succeeded", "Failed"), timeout=90)
    logs = test_cluster.kubectl("logs", "probe").stdout
    assert _phase(test_cluster, "probe") == "Succeeded", logs
    assert "kubernetes at 10.96.0.1 reached" in logs
    assert "interpreter /usr/bin/python 3.11" in logs


def test_stop_leaves_the_machine_as_found(real_node):
    """Last: the node stops (its processes, cgroups, veth, namespaces with their mounts,
    iptables rules and sockets) and this machine reads as it did before it started."""
    real_node.node.stop()
    deadline = time.monotonic() + 10
    while machine_state() != real_node.before and time.monotonic() < deadline:
        time.sleep(0.5)
    after = machine_state()
    changed = {k: (real_node.before[k], after[k]) for k in after if after[k] != real_node.before[k]}
    assert not changed
