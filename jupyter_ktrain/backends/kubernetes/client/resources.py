"""The Kubernetes resources the backend touches, one frozen descriptor per kind (the shape of
lightkube's ``ApiInfo``): its API group and version, its plural (the REST path), its kind and
whether it lives in a namespace. A request names a resource by its descriptor, never by a
``(group, version, plural)`` tuple: ``POD.path(ns, name)`` is the REST path of one pod.

A job kind's resource comes from :data:`jupyter_ktrain.kinds.KIND_TABLE`
(:func:`job_resource`); :func:`resource_of` finds the descriptor of any kind a job is made
of (the job and what is created beside it).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from ....kinds import JobKind, job_kind

__all__ = [
    "CLUSTER_TRAINING_RUNTIME",
    "CONFIG_MAP",
    "EVENT",
    "LOCAL_QUEUE",
    "NETWORK_ATTACHMENT",
    "OWNED",
    "PENDING_WORKLOADS",
    "PERSISTENT_VOLUME_CLAIM",
    "POD",
    "SECRET",
    "SERVICE",
    "SERVICE_MONITOR",
    "TRAINING_RUNTIME",
    "WORKLOAD",
    "Resource",
    "job_resource",
    "resource_of",
]


@dataclass(frozen=True)
class Resource:
    """One kind of object as the API server serves it."""

    kind: str  # "ConfigMap"
    group: str  # "" for the core API
    version: str
    plural: str  # "configmaps": its REST path and its RBAC resource
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``apiVersion`` of its objects: ``v1``, ``kubeflow.org/v1``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """Its name in RBAC and ``kubectl``: ``pytorchjobs.kubeflow.org``, ``pods``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str = "", name: str = "") -> str:
        """REST path of the collection in ``namespace`` (of a cluster-scoped kind: of all),
        or of the object ``name``."""
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced:
            base = f"{base}/namespaces/{quote(namespace)}"
        out = f"{base}/{self.plural}"
        return f"{out}/{quote(name)}" if name else out


CONFIG_MAP = Resource("ConfigMap", "", "v1", "configmaps")
SECRET = Resource("Secret", "", "v1", "secrets")
POD = Resource("Pod", "", "v1", "pods")
SERVICE = Resource("Service", "", "v1", "services")
EVENT = Resource("Event", "", "v1", "events")
PERSISTENT_VOLUME_CLAIM = Resource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims")
SERVICE_MONITOR = Resource("ServiceMonitor", "monitoring.coreos.com", "v1", "servicemonitors")
TRAINING_RUNTIME = Resource(
    "TrainingRuntime", "trainer.kubeflow.org", "v1alpha1", "trainingruntimes"
)
CLUSTER_TRAINING_RUNTIME = Resource(
    "ClusterTrainingRuntime",
    "trainer.kubeflow.org",
    "v1alpha1",
    "clustertrainingruntimes",
    namespaced=False,
)
WORKLOAD = Resource("Workload", "kueue.x-k8s.io", "v1beta2", "workloads")
LOCAL_QUEUE = Resource("LocalQueue", "kueue.x-k8s.io", "v1beta2", "localqueues")
# Kueue's visibility API: a LocalQueue's pending workloads, in queue order
PENDING_WORKLOADS = Resource("LocalQueue", "visibility.kueue.x-k8s.io", "v1beta2", "localqueues")
NETWORK_ATTACHMENT = Resource(
    "NetworkAttachmentDefinition", "k8s.cni.cncf.io", "v1", "network-attachment-definitions"
)

#: kinds made beside a job (created first, then owned by it), by kind
OWNED: dict[str, Resource] = {
    r.kind: r for r in (CONFIG_MAP, SECRET, POD, SERVICE, SERVICE_MONITOR, TRAINING_RUNTIME)
}


def job_resource(kind: JobKind) -> Resource:
    """The resource of a job kind's objects."""
    return Resource(kind.name, kind.group, kind.version, kind.plural)


def resource_of(kind: str) -> Resource:
    """The descriptor of ``kind``: one made beside a job, else a job kind; KeyError if
    neither."""
    if kind in OWNED:
        return OWNED[kind]
    found = job_kind(kind)
    if found is None:
        raise KeyError(kind)
    return job_resource(found)
