"""The whole test cluster in one object: API server, scheduler, kubelet, Training Operator.

with Cluster(workdir) as c:          # serves on 127.0.0.1:<free port>
    c.write_kubeconfig(path)
    c.set_nodes([Node("gpu-0", gpus=8, rdma=1)])
    c.faults.fail_next(2, 429)
"""

from __future__ import annotations

import base64
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .api import Api, Rule
from .faults import Faults
from .kubelet import Kubelet
from .resources import BUILTINS, Registry, load_crds
from .scheduler import Scheduler
from .server import ApiServer
from .store import Store, now
from .tls import make_cert, server_context

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Node:
    """A node to advertise: capacity and labels. All nodes run pods on this machine."""

    name: str = "node-0"
    cpu: str = "64"
    memory: str = "512Gi"
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    rdma: dict[str, int] = field(default_factory=dict)  # {"rdma/rdma_shared_device_a": 1}
    labels: dict[str, str] = field(default_factory=dict)

    def manifest(self) -> dict[str, Any]:
        cap: dict[str, str] = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": "110",
            "ephemeral-storage": "100Gi",
        }
        if self.gpus:
            cap[self.gpu_resource] = str(self.gpus)
        cap.update({k: str(v) for k, v in self.rdma.items()})
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }
        ts = now()
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
            "status": {
                "capacity": cap,
                "allocatable": dict(cap),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": ts,
                        "lastTransitionTime": ts,
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "containerRuntimeVersion": "process://1",
                    "kernelVersion": "",
                    "kubeProxyVersion": "v1.32.4",
                    "kubeletVersion": "v1.32.4",
                    "machineID": "",
                    "operatingSystem": "linux",
                    "osImage": "ktrain test cluster",
                    "systemUUID": "",
                },
            },
        }


class Cluster:
    def __init__(
        self,
        workdir: Path | None = None,
        registry: str | None = None,
        nodes: list[Node] | None = None,
        port: int = 0,
    ) -> None:
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="ktrain-cluster-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.registry = Registry(BUILTINS + load_crds())
        self.store = Store(self.registry)
        self.api = Api(self.registry, self.store, "")
        self.token = secrets.token_hex(16)
        self.faults = Faults(self.store)
        self.cert, key = make_cert(self.workdir / "pki")
        tls = server_context(self.cert, key)
        self.server = ApiServer(self.api, self.token, self.faults, port, tls)
        self.url = self.server.url
        self.scheduler = Scheduler(self.store)
        self.kubelet = Kubelet(self.store, self.workdir, self.server.port, registry)
        self.faults.kubelet = self.kubelet
        self.api.log_source = self.kubelet.logs.serve
        from .operator import Operator

        self.operator = Operator(self.store, self.api)
        ns = self.registry.by_plural("namespaces")
        for name in SYSTEM_NAMESPACES:
            obj = {"metadata": {"name": name}}
            from .defaults import namespace

            namespace(obj)
            self.store.create(ns, "", obj)
        self.set_nodes(nodes or [Node()])

    # -- configuration ----------------------------------------------------------------------

    def set_nodes(self, nodes: list[Node]) -> None:
        """Replace the advertised nodes (pods already bound keep running)."""
        res = self.registry.by_plural("nodes")
        for old in self.store.list(res, None)[0]:
            self.store.delete(res, "", old["metadata"]["name"])
        for node in nodes:
            self.store.create(res, "", node.manifest())

    def set_rbac(self, rules: list[Rule]) -> None:
        """The table SelfSubjectAccessReviews are answered from (default: allow everything)."""
        self.api.rbac = list(rules)

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ktrain-test",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(
                            self.cert.read_bytes()
                        ).decode(),
                    },
                }
            ],
            "users": [{"name": "ktrain-test", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": "ktrain-test",
                    "context": {
                        "cluster": "ktrain-test",
                        "user": "ktrain-test",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "ktrain-test",
            "preferences": {},
        }

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(self.kubeconfig(namespace)))
        path.chmod(0o600)
        return path

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Cluster:
        self.server.start()
        self.scheduler.start()
        self.kubelet.start()
        self.operator.start()
        return self

    def stop(self) -> None:
        self.operator.stop()
        self.scheduler.stop()
        self.kubelet.stop()
        self.server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
