"""The whole test cluster in one object: the real control plane and Kubeflow controllers
(``controlplane.py``), our process kubelet, and the fault proxy every client talks to.

with Cluster(workdir) as c:
    path = c.user_kubeconfig(path, namespace)   # the namespace's `notebook` service account
    c.set_nodes([Node("gpu-0", gpus=8, rdma={"rdma/rdma_shared_device_a": 1})])
    c.set_rbac(namespace, [Rule(verbs=("get", "list"), resources=("pods",))])
    c.faults.fail_next(2, 429)
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .controlplane import NOTEBOOK_SA, ControlPlane
from .faults import Faults
from .kubelet import Kubelet
from .proxy import FaultProxy
from .rest import ApiError, Rest

KUBEFLOW_ROLES = Path(__file__).resolve().parents[1] / "data" / "kubeflow"


@dataclass(frozen=True)
class Rule:
    """One RBAC rule of the notebook user's Role; ``"*"`` matches anything. ``resources`` may
    name subresources (``pods/log``)."""

    verbs: tuple[str, ...] = ("*",)
    groups: tuple[str, ...] = ("*",)
    resources: tuple[str, ...] = ("*",)

    def manifest(self) -> dict[str, Any]:
        return {
            "apiGroups": list(self.groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }


@dataclass
class Node:
    """A node to register: capacity, labels and taints. All nodes run pods on this machine."""

    name: str = "node-0"
    cpu: str = "64"
    memory: str = "512Gi"
    gpus: int = 0
    gpu_resource: str = "nvidia.com/gpu"
    rdma: dict[str, int] = field(default_factory=dict)  # {"rdma/rdma_shared_device_a": 1}
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)

    def manifest(self, kube_version: str) -> dict[str, Any]:
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
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels},
            "spec": {"taints": list(self.taints)} if self.taints else {},
            "status": {
                "capacity": cap,
                "allocatable": dict(cap),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                    }
                ],
                # so the API server proxies exec WebSockets to our kubelet as they come
                "declaredFeatures": ["ExtendWebSocketsToKubelet"],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": "",
                    "machineID": "",
                    "systemUUID": "",
                    "containerRuntimeVersion": "process://1",
                    "kernelVersion": "",
                    "kubeProxyVersion": "",
                    "kubeletVersion": kube_version,
                    "operatingSystem": "linux",
                    "osImage": "ktrain test cluster",
                },
            },
        }


class Cluster:
    def __init__(
        self,
        workdir: Path | None = None,
        registry: str | None = None,
        nodes: list[Node] | None = None,
        shared: Path | None = None,
        worker: bool = False,
    ) -> None:
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="ktrain-cluster-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.plane = ControlPlane(self.workdir / "control-plane", worker=worker)
        pki = self.plane.pki
        self.ca_cert = pki.ca.cert
        serving = pki.issue("proxy", "kube-apiserver", dns=("localhost",), ips=("127.0.0.1",))
        self.proxy = FaultProxy(self.plane.port, str(pki.ca.cert), serving)
        self.url = self.proxy.url
        self.admin = Rest(self.url, self.plane.admin_token, pki.ca.cert)
        kubelet_cert = pki.issue("kubelet", "kubelet", dns=("localhost",), ips=("127.0.0.1",))
        self.kubelet = Kubelet(
            Rest(self.plane.url, self.plane.admin_token, pki.ca.cert),
            self.workdir / "kubelet",
            self.plane.port,
            kubelet_cert,
            registry,
            pod_ip=self.plane.address,
            kubectl=self.plane.bin / "kubectl",
            host_hosts=self.plane.hosts,
            shared=shared,
        )
        self.faults = Faults(self.proxy, self.kubelet, self.admin)
        self._nodes = nodes or [Node()]
        self.kube_version = ""
        self._kubeflow_roles = False

    # -- configuration ----------------------------------------------------------------------

    def set_nodes(self, nodes: list[Node]) -> None:
        """Replace the registered nodes (pods already bound keep running)."""
        self.kubelet.set_nodes([n.manifest(self.kube_version) for n in nodes])

    def create_namespace(self, namespace: str) -> None:
        self.admin.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        self.set_rbac(namespace, [Rule()])
        crb = {
            "metadata": {"name": f"ktrain-notebook-{namespace}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "ktrain-notebook-cluster",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NOTEBOOK_SA, "namespace": namespace}],
        }
        self.admin.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", crb)

    def kubeflow_roles(self) -> None:
        """Kubeflow's user roles as Kubeflow ships them (``tests/data/kubeflow``), loaded once:
        the aggregated ``kubeflow-admin``/``-edit``/``-view`` ClusterRoles, filled by the
        kube-controller-manager's aggregation controller from their Kubernetes, Training
        Operator and Trainer parts. Returns once ``kubeflow-edit`` grants PyTorchJobs."""
        if self._kubeflow_roles:
            return
        files = sorted(KUBEFLOW_ROLES.glob("*.yaml"))
        self.plane.apply_files(files)

        def aggregated() -> bool:
            role = self.admin.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/kubeflow-edit")
            granted = {r for rule in role.get("rules") or [] for r in rule.get("resources", [])}
            return {"pytorchjobs", "trainjobs", "pods/exec"} <= granted

        deadline = time.monotonic() + 30
        while not aggregated():
            if time.monotonic() > deadline:
                raise RuntimeError("kubeflow-edit was not aggregated within 30 s")
            time.sleep(0.2)
        self._kubeflow_roles = True

    def create_profile(self, namespace: str) -> None:
        """A Kubeflow profile's namespace, as the profile controller makes it: the namespace
        (with the profile's labels), its ``default-editor`` and ``default-viewer``
        ServiceAccounts, each bound by a RoleBinding of its own name to ``kubeflow-edit`` /
        ``kubeflow-view``. Nothing cluster-wide."""
        self.kubeflow_roles()
        labels = {"app.kubernetes.io/part-of": "kubeflow-profile"}
        self.admin.create("/api/v1/namespaces", {"metadata": {"name": namespace, "labels": labels}})
        accounts = (("default-editor", "kubeflow-edit"), ("default-viewer", "kubeflow-view"))
        for account, role in accounts:
            self.admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                              {"metadata": {"name": account}})  # fmt: skip
            binding = {
                "metadata": {"name": account},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": role,
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            }
            self.admin.create(
                f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", binding
            )

    def profile_kubeconfig(self, path: Path, namespace: str) -> Path:
        """A kubeconfig holding a token of the profile's ``default-editor`` account."""
        token = self.plane.token(namespace, "default-editor")
        return self.plane.write_kubeconfig(Path(path), self.url, token, namespace)

    def delete_namespace(self, namespace: str, timeout: float = 60, wait: bool = True) -> None:
        """Delete the namespace and, with ``wait``, wait until its pods are gone (the kubelet
        deletes a pod only after its processes ended): where pods share this machine's
        network, the next test's master port is free only then."""
        self.admin.delete(
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/ktrain-notebook-{namespace}"
        )
        self.admin.delete(f"/api/v1/namespaces/{namespace}")
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.admin.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
                return
            time.sleep(0.2)

    def set_rbac(self, namespace: str, rules: list[Rule]) -> None:
        """The notebook user's Role in ``namespace`` (default: everything in it)."""
        base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        role = {"metadata": {"name": "notebook"}, "rules": [r.manifest() for r in rules]}
        self.admin.delete(f"{base}/roles/notebook")
        self.admin.create(f"{base}/roles", role)
        binding = {
            "metadata": {"name": "notebook"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "notebook",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NOTEBOOK_SA, "namespace": namespace}],
        }
        with contextlib.suppress(ApiError):
            self.admin.create(f"{base}/rolebindings", binding)

    def user_kubeconfig(self, path: Path, namespace: str) -> Path:
        """A kubeconfig for the namespace's ``notebook`` service account (its token)."""
        token = self.plane.notebook_token(namespace)
        return self.plane.write_kubeconfig(Path(path), self.url, token, namespace)

    def admin_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        token = self.plane.admin_token
        return self.plane.write_kubeconfig(Path(path), self.url, token, namespace)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Cluster:
        try:
            self.proxy.start()
            self.plane.start()
            self.kube_version = self.admin.get("/version")["gitVersion"]
            self._cluster_role()
            self.kubelet.start()
            self.set_nodes(self._nodes)
        except BaseException:
            self.stop()
            raise
        return self

    def _cluster_role(self) -> None:
        """What a notebook user may see outside its namespace: nodes and namespaces, the
        cluster runtimes and Kueue's queues, flavors and topologies (read)."""
        role = {
            "metadata": {"name": "ktrain-notebook-cluster"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "namespaces"],
                    "verbs": ["get", "list", "watch"],
                },
                {  # what the Kubeflow SDK's list_runtimes() reads
                    "apiGroups": ["trainer.kubeflow.org"],
                    "resources": ["clustertrainingruntimes"],
                    "verbs": ["get", "list", "watch"],
                },
                {  # what --topology and a MultiKueue queue are checked against (README:
                    # Placement and several clusters)
                    "apiGroups": ["kueue.x-k8s.io"],
                    "resources": [
                        "clusterqueues",
                        "resourceflavors",
                        "topologies",
                        "admissionchecks",
                        "multikueueconfigs",
                        "multikueueclusters",
                    ],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        }
        with contextlib.suppress(ApiError):
            self.admin.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role)

    def stop(self) -> None:
        self.kubelet.stop()
        with contextlib.suppress(Exception):
            self.proxy.stop()
        self.plane.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
