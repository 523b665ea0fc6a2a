"""pytest plugin: the ``test_cluster`` fixture.

One cluster per session (started on first use); each test gets its own namespace, a kubeconfig
whose context defaults to it, and a clean slate afterwards (faults off, nodes and RBAC table
back to their defaults, namespace deleted with everything in it)::

    def test_x(test_cluster):
        test_cluster.kubeconfig      # Path to a kubeconfig (context namespace = .namespace)
        test_cluster.url, test_cluster.token, test_cluster.namespace
        test_cluster.faults.fail_next(2, 429)
        test_cluster.set_nodes([Node("gpu-0", gpus=8, rdma={"rdma/rdma_shared_device_a": 1})])
        test_cluster.set_rbac([Rule(verbs=("get", "list"), resources=("pods",))])
        test_cluster.kubectl("get", "pods")      # CompletedProcess, text, check=False
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .api import Rule
from .cluster import Cluster, Node
from .errors import ApiError
from .faults import Faults

KUBECTL = "/usr/bin/kubectl"


@dataclass
class ClusterHandle:
    cluster: Cluster
    kubeconfig: Path
    namespace: str
    home: Path

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def token(self) -> str:
        return self.cluster.token

    @property
    def ca_cert(self) -> Path:
        """The API server's self-signed certificate (its own CA)."""
        return self.cluster.cert

    @property
    def faults(self) -> Faults:
        return self.cluster.faults

    def set_nodes(self, nodes: list[Node]) -> None:
        self.cluster.set_nodes(nodes)

    def set_rbac(self, rules: list[Rule]) -> None:
        self.cluster.set_rbac(rules)

    def kubectl(
        self, *args: str, timeout: float = 60, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HOME": str(self.home), "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            input=stdin,
        )


@pytest.fixture(scope="session")
def ktrain_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(
        tmp_path_factory.mktemp("cluster"), registry=os.environ.get("KTRAIN_TEST_REGISTRY")
    )
    with cluster:
        yield cluster


@pytest.fixture
def test_cluster(ktrain_cluster_session: Cluster, tmp_path: Path) -> Iterator[ClusterHandle]:
    cluster = ktrain_cluster_session
    ns = f"t-{uuid.uuid4().hex[:8]}"
    namespaces = cluster.registry.by_plural("namespaces")
    from .defaults import namespace

    obj = {"metadata": {"name": ns}}
    namespace(obj)
    cluster.store.create(namespaces, "", obj)
    home = tmp_path / "home"
    home.mkdir()
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", namespace=ns)
    try:
        yield ClusterHandle(cluster, kubeconfig, ns, home)
    finally:
        cluster.faults.reset()
        cluster.set_nodes([Node()])
        cluster.set_rbac([Rule()])
        with contextlib.suppress(ApiError):
            cluster.store.delete(namespaces, "", ns)
