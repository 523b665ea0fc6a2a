"""pytest plugin: the ``test_cluster`` fixture.

One cluster per session (started on first use: the real control plane and Kubeflow
controllers, built once per machine by ``make cluster``); each test gets its own namespace, a
kubeconfig for that namespace's ``notebook`` service account (a namespaced Role, as a
notebook user has), and a clean slate afterwards (faults off, nodes and RBAC back to their
defaults, namespace deleted by the real namespace controller)::

    def test_x(test_cluster):
        test_cluster.kubeconfig      # Path to the notebook user's kubeconfig (namespace default)
        test_cluster.url, test_cluster.namespace, test_cluster.ca_cert
        test_cluster.faults.fail_next(2, 429)
        test_cluster.set_nodes([Node("gpu-0", gpus=8, rdma={"rdma/rdma_shared_device_a": 1})])
        test_cluster.set_rbac([Rule(verbs=("get", "list"), resources=("pods",))])
        test_cluster.rdma_network("rdma-net")        # a Multus NetworkAttachmentDefinition
        test_cluster.kueue_queue("team-a", cpu="2")  # a Kueue LocalQueue and its ClusterQueue
        test_cluster.kubectl("get", "pods")          # as the notebook user
        test_cluster.kubectl("get", "nodes", admin=True)

``kubeflow_profiles`` (one per test module) makes Kubeflow profile namespaces, as Kubeflow's
profile controller does, with Kubeflow's own user roles (``tests/data/kubeflow``): each
handle's kubeconfig holds a token of the namespace's ``default-editor`` ServiceAccount, bound
by a RoleBinding to ``kubeflow-edit`` and to nothing cluster-wide::

    def test_y(kubeflow_profiles):
        alice = kubeflow_profiles("alice")   # a ClusterHandle; namespace "kf-alice-XXXX"
        alice.kubectl("auth", "can-i", "create", "pytorchjobs")
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .cluster import Cluster, Node, Rule
from .faults import Faults

TEST_NS_LABEL = "ktrain.test/namespace"  # cluster-scoped objects a test made, by its namespace
TAS_NODE_LABEL = "ktrain.test/tas"  # the nodes of a test's topology-aware flavor (its namespace)


@dataclass
class ClusterHandle:
    cluster: Cluster
    kubeconfig: Path
    admin_kubeconfig: Path
    namespace: str
    home: Path

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def ca_cert(self) -> Path:
        return self.cluster.ca_cert

    @property
    def faults(self) -> Faults:
        return self.cluster.faults

    @property
    def kubectl_path(self) -> Path:
        return self.cluster.plane.bin / "kubectl"

    def set_nodes(self, nodes: list[Node]) -> None:
        self.cluster.set_nodes(nodes)

    def set_rbac(self, rules: list[Rule]) -> None:
        self.cluster.set_rbac(self.namespace, rules)

    def rdma_network(self, name: str = "rdma-net") -> None:
        """A Multus NetworkAttachmentDefinition in this test's namespace, as a platform team
        makes one for its RDMA NICs (macvlan on the RDMA port, whereabouts addresses). The CRD
        is served; no CNI runs here, so pods start without the extra interface."""
        config = {
            "cniVersion": "0.3.1",
            "name": name,
            "type": "macvlan",
            "master": "ens1f0np0",
            "ipam": {"type": "whereabouts", "range": "192.168.100.0/24"},
        }
        nad = {
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"config": json.dumps(config)},
        }
        done = self.kubectl("apply", "-f", "-", stdin=json.dumps(nad), admin=True)
        if done.returncode != 0:
            raise RuntimeError(f"creating NetworkAttachmentDefinition {name}: {done.stderr}")

    def kueue_queue(
        self, name: str = "team-a", cpu: str = "2", topology: tuple[str, ...] = ()
    ) -> str:
        """What a platform team sets up for Kueue: a ResourceFlavor, a ClusterQueue with a
        ``cpu`` quota (and memory to spare) open to this test's namespace only, in which a
        higher-priority workload preempts a lower one, and a LocalQueue ``name`` in the
        namespace pointing at it. Returns the ClusterQueue's name (deleted after the test, by
        its label).

        With ``topology`` (node label keys, highest level first), the flavor is a
        Topology-Aware Scheduling one, as Kueue's TAS guide sets it up: a ``Topology`` of those
        levels and a ResourceFlavor naming it, for the nodes labelled ``ktrain.test/tas=NS``
        (give them those labels with :meth:`set_nodes`)."""
        cq = f"{self.namespace}-{name}"
        flavor: dict[str, Any] = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default-flavor"},
        }
        topo: list[dict[str, Any]] = []
        if topology:
            owned = {"name": cq, "labels": {TEST_NS_LABEL: self.namespace}}
            topo = [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Topology",
                    "metadata": owned,
                    "spec": {"levels": [{"nodeLabel": key} for key in topology]},
                }
            ]
            flavor = {
                **flavor,
                "metadata": owned,
                "spec": {"nodeLabels": {TAS_NODE_LABEL: self.namespace}, "topologyName": cq},
            }
        objects = [
            *topo,
            flavor,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ClusterQueue",
                "metadata": {"name": cq, "labels": {TEST_NS_LABEL: self.namespace}},
                "spec": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                    },
                    # a higher-priority workload may take a lower one's quota back
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory"],
                            "flavors": [
                                {
                                    "name": flavor["metadata"]["name"],
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": cpu},
                                        {"name": "memory", "nominalQuota": "64Gi"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"clusterQueue": cq},
            },
        ]
        done = self.kubectl(
            "apply", "--server-side", "-f", "-", stdin=json.dumps({"apiVersion": "v1",
            "kind": "List", "items": objects}), admin=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"creating Kueue queue {name}: {done.stderr}")
        return cq

    def priority_class(self, name: str, value: int) -> str:
        """A PriorityClass (cluster-scoped: named after this test's namespace, deleted after
        the test); returns its name."""
        full = f"{self.namespace}-{name}"
        pc = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": full, "labels": {TEST_NS_LABEL: self.namespace}},
            "value": value,
        }
        done = self.kubectl("apply", "-f", "-", stdin=json.dumps(pc), admin=True)
        if done.returncode != 0:
            raise RuntimeError(f"creating PriorityClass {full}: {done.stderr}")
        return full

    def kubectl(
        self, *args: str, timeout: float = 60, stdin: str | None = None, admin: bool = False
    ) -> subprocess.CompletedProcess[str]:
        config = self.admin_kubeconfig if admin else self.kubeconfig
        env = {**os.environ, "HOME": str(self.home), "KUBECONFIG": str(config)}
        return subprocess.run(
            [str(self.kubectl_path), "--kubeconfig", str(config), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=stdin,
        )


@pytest.fixture(scope="session")
def ktrain_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(
        tmp_path_factory.mktemp("cluster"),
        registry=os.environ.get("KTRAIN_TEST_REGISTRY"),
        # the session's folders stay visible in each container's own /tmp: tests pass marks
        # to their pods through their tmp_path (a shortcut for a volume both would mount)
        shared=tmp_path_factory.getbasetemp(),
    )
    with cluster:
        yield cluster


@pytest.fixture
def test_cluster(ktrain_cluster_session: Cluster, tmp_path: Path) -> Iterator[ClusterHandle]:
    cluster = ktrain_cluster_session
    ns = f"t-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(ns)
    home = tmp_path / "home"
    home.mkdir()
    kubeconfig = cluster.user_kubeconfig(tmp_path / "kubeconfig", ns)
    admin = cluster.admin_kubeconfig(tmp_path / "admin.kubeconfig", ns)
    try:
        yield ClusterHandle(cluster, kubeconfig, admin, ns, home)
    finally:
        cluster.faults.reset()
        cluster.plane.kubectl(  # this test's cluster-scoped objects
            "delete", "clusterqueues.kueue.x-k8s.io,priorityclasses.scheduling.k8s.io,"
            "resourceflavors.kueue.x-k8s.io,topologies.kueue.x-k8s.io", "-l",
            f"{TEST_NS_LABEL}={ns}", "--wait=false", check=False,
        )  # fmt: skip
        # pods first, while their nodes' kubelets still run them: a pod on a node removed
        # before would stay Terminating until the pod garbage collector's orphan sweep (~50 s).
        # Where every pod has a network of its own and the test kept the default node, the
        # next test starts while the namespace controller and the kubelet clear this one's
        # (its pods hold no port the next could want; the node's room is far larger than a
        # test's pods): about 3 s less per test
        default = {Node().name}
        wait = cluster.kubelet.net is None or set(cluster.kubelet.nodes) != default
        cluster.delete_namespace(ns, wait=wait)
        cluster.set_nodes([Node()])


@pytest.fixture(scope="module")
def kubeflow_profiles(
    ktrain_cluster_session: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], ClusterHandle]]:
    """``make(user)`` -> a new Kubeflow profile namespace of this module (deleted at its end),
    as a :class:`ClusterHandle` whose kubeconfig is the profile's ``default-editor``."""
    cluster = ktrain_cluster_session
    made: list[str] = []

    def make(user: str) -> ClusterHandle:
        ns = f"kf-{user}-{uuid.uuid4().hex[:6]}"
        cluster.create_profile(ns)
        made.append(ns)
        tmp = tmp_path_factory.mktemp(ns)
        home = tmp / "home"
        home.mkdir()
        kubeconfig = cluster.profile_kubeconfig(tmp / "kubeconfig", ns)
        admin = cluster.admin_kubeconfig(tmp / "admin.kubeconfig", ns)
        return ClusterHandle(cluster, kubeconfig, admin, ns, home)

    try:
        yield make
    finally:
        cluster.faults.reset()
        for ns in made:
            cluster.delete_namespace(ns)
