"""One queue, several clusters (Kueue's MultiKueue): a job submitted on the manager cluster
through a queue whose ClusterQueue has an AdmissionCheck of controller
``kueue.x-k8s.io/multikueue`` is run on the worker cluster that admitted it.

What Kueue does (``pkg/controller/admissionchecks/multikueue``, ``jobframework``): its webhook
sets the job's ``runPolicy.managedBy`` (a Kubeflow job's; ``spec.managedBy`` of others) to
``kueue.x-k8s.io/multikueue`` so that the manager's controller leaves it alone; it copies the
Workload and then the job (same name and namespace, ``managedBy`` cleared) to every worker of
the check's MultiKueueConfig, keeps the one that reserves quota first, and writes its name to
the manager Workload's ``status.clusterName`` (and the check's message, ``The workload got
reservation on "NAME"``); the worker job's status is copied back onto the manager's job. Only
the job is copied: what runs beside it (the code ConfigMap) is made on the workers by
:class:`Workers` before the job is created.

The worker is reached through the kubeconfig context ``%ktrain config clusters=NAME=CONTEXT``
names for it; else through the kubeconfig Kueue itself uses, the MultiKueueCluster's Secret
(``spec.clusterSource.kubeConfig``, ``locationType: Secret``, key ``kubeconfig``, in Kueue's
namespace: ``kueue-system`` unless ``%ktrain config kueue_namespace=`` says otherwise), where
this user may read it (held in memory, never written out). Where neither reaches it, the job is
shown as the manager mirrors it, and the user is told so once.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...config import Config, cluster_contexts
from ...errors import ClusterError, JobNotFound, SpecError
from ...spec.job import JobSpec
from .client.kube_api import Api
from .client.resources import CONFIG_MAP, LOCAL_QUEUE, SECRET, Resource
from .client.retries import Forbidden, Unauthorized
from .cluster import Cluster
from .lookup import job_object, watch

__all__ = ["MULTIKUEUE", "Route", "Workers", "dispatched_to", "worker_of"]

_KUEUE = ("kueue.x-k8s.io", "v1beta2")
MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # the AdmissionCheck controller, the managedBy value
CLUSTER_QUEUE = Resource("ClusterQueue", *_KUEUE, "clusterqueues", namespaced=False)
ADMISSION_CHECK = Resource("AdmissionCheck", *_KUEUE, "admissionchecks", namespaced=False)
MULTIKUEUE_CONFIG = Resource("MultiKueueConfig", *_KUEUE, "multikueueconfigs", namespaced=False)
MULTIKUEUE_CLUSTER = Resource("MultiKueueCluster", *_KUEUE, "multikueueclusters", namespaced=False)
KUEUE_NAMESPACE = "kueue-system"  # Kueue's namespace as its manifests install it
_RESERVED = re.compile(r'got reservation on "([^"]+)"')


def managed_by(job: Mapping[str, Any]) -> str:
    """The controller a job names as its manager (``runPolicy.managedBy`` of a Kubeflow v1 job,
    ``spec.managedBy`` of the others), or ""."""
    spec = job.get("spec") or {}
    return str((spec.get("runPolicy") or {}).get("managedBy") or spec.get("managedBy") or "")


def worker_of(workload: Mapping[str, Any] | None) -> str:
    """The worker cluster (MultiKueueCluster name) that admitted the Workload, or "": its
    ``status.clusterName``, else the name in its admission check's message."""
    status = (workload or {}).get("status") or {}
    if status.get("clusterName"):
        return str(status["clusterName"])
    for check in status.get("admissionChecks") or []:
        found = _RESERVED.search(str(check.get("message") or ""))
        if found:
            return found.group(1)
    return ""


def dispatched_to(job: Mapping[str, Any] | None, workload: Mapping[str, Any] | None) -> str:
    """The worker cluster a MultiKueue job runs on, or "" (not such a job, or not there yet)."""
    if not job or managed_by(job) != MULTIKUEUE:
        return ""
    return worker_of(workload)


@dataclass(frozen=True)
class Route:
    """Where job ``name`` runs: worker cluster ``where`` and the backend that reaches it (None
    where this kubeconfig does not: the manager's mirror is shown)."""

    where: str
    backend: Any = None


class Workers:
    """The worker clusters of the manager ``cluster``: a backend per worker (made by ``make``
    from a config), the route of each followed job, and the code objects made on workers."""

    def __init__(self, cluster: Cluster, make: Callable[[Config, Api | None], Any]) -> None:
        self.cluster = cluster
        self.make = make
        self.contexts = cluster_contexts(cluster.config)
        self._backends: dict[str, Any] = {}  # worker -> its backend, or None: not reachable
        self._told: set[str] = set()  # jobs whose unreachable worker the user was told of
        self._adopted: set[str] = set()  # jobs whose worker ConfigMap their worker job owns
        self._apis: list[Api] = []  # clients this made from Secrets (closed with it)

    def close(self) -> None:
        """Close the worker backends this made."""
        for backend in self._backends.values():
            if backend is not None:
                backend.close()
        for api in self._apis:
            api.close()

    # -- following -------------------------------------------------------------------------

    def multikueue(self, name: str) -> bool:
        """Whether job ``name`` is left to MultiKueue (its pods run on a worker, never here)."""
        return managed_by(job_object(self.cluster, name) or {}) == MULTIKUEUE

    def route(self, name: str) -> Route | None:
        """Job ``name``'s worker, once Kueue dispatched it there; None for any other job."""
        try:
            found = watch(self.cluster, name)
        except JobNotFound:
            return None
        where = dispatched_to(found.job, found.workload)
        if not where:
            return None
        backend = self.backend(where, name)
        if backend is None:
            return Route(where)
        try:
            backend.statuses.shape(name)  # the worker's copy exists (JobNotFound: not yet)
        except JobNotFound:
            return Route(where)
        except ClusterError as exc:
            self._unreachable(where, name, str(exc))
            return Route(where)
        self._adopt(backend, name)
        return Route(where, backend)

    def backend(self, where: str, name: str = "") -> Any:
        """The backend of worker ``where``, made once; None (told once per job) where no context
        names it or it cannot be reached."""
        if where in self._backends:
            found = self._backends[where]
            if found is None and name:
                self._unreachable(where, name, "")
            return found
        context = self.contexts.get(where)
        config = replace(self.cluster.config, context=context, clusters=(),
                         namespace=self.cluster.namespace)  # fmt: skip
        made, api = None, None
        if context is None:
            api, why = self._secret_api(where)
        if context is not None or api is not None:
            try:
                made = self.make(config, api)
                made.cluster.api.get("/version")
                why = ""
            except ClusterError as exc:
                made, why = None, str(exc).splitlines()[0]
        self._backends[where] = made
        if made is None:
            self._unreachable(where, name, why)
        return made

    def _secret_api(self, where: str) -> tuple[Api | None, str]:
        """A client for worker ``where`` from its MultiKueueCluster's kubeconfig Secret, or
        None and why not (the one line the user is told)."""
        import base64

        import yaml

        fix = f"add `%ktrain config clusters={where}=CONTEXT`"
        api = self.cluster.api
        try:
            mkc = api.find(MULTIKUEUE_CLUSTER.path(name=where)) or {}
            spec = mkc.get("spec") or {}
            source = (spec.get("clusterSource") or {}).get("kubeConfig") or spec.get("kubeConfig")
            if not source or source.get("locationType", "Secret") != "Secret":
                return (
                    None,
                    f"no kubeconfig context names it and its kubeconfig is no Secret: {fix}",
                )
            namespace = self.cluster.config.kueue_namespace or KUEUE_NAMESPACE
            secret = api.find(SECRET.path(namespace, str(source.get("location") or ""))) or {}
            raw = (secret.get("data") or {}).get("kubeconfig")
            if not raw:
                return None, f"no kubeconfig context names it and its Secret holds none: {fix}"
            data = yaml.safe_load(base64.b64decode(raw))
        except (Forbidden, Unauthorized):
            return None, (
                "no kubeconfig context names it and its MultiKueueCluster's Secret is not "
                f"readable by you: {fix}"
            )
        except (ClusterError, ValueError, yaml.YAMLError) as exc:
            return None, f"its MultiKueueCluster's kubeconfig cannot be read ({exc}): {fix}"
        from kubernetes import client, config

        cfg = client.Configuration()
        cfg.retries = 0  # with_retries is the one retry policy
        try:
            made = Api(config.new_client_from_config_dict(data, client_configuration=cfg),
                       "default", f"MultiKueueCluster {where!r}'s Secret")  # fmt: skip
        except Exception as exc:  # the client's ConfigException, or a malformed document
            return None, f"its MultiKueueCluster's kubeconfig cannot be used ({exc}): {fix}"
        self._apis.append(made)
        return made, ""

    def _unreachable(self, where: str, name: str, why: str) -> None:
        if not name or name in self._told:
            return
        self._told.add(name)
        self._backends[where] = None
        said = f" ({why})" if why else ""
        self.cluster.say(
            f"{name}: runs on cluster {where!r} (MultiKueue), which cannot be reached from "
            f"here{said}; showing what the manager mirrors: its state, not its pods or logs."
        )

    def _adopt(self, backend: Any, name: str) -> None:
        """The worker's job owns the code ConfigMap made there (deleted with it); once."""
        worker = backend.cluster
        if name in self._adopted:
            return
        with contextlib.suppress(ClusterError, JobNotFound):
            job = job_object(worker, name)
            if job is None:
                return
            self._adopted.add(name)
            ref = {
                "apiVersion": job["apiVersion"],
                "kind": job["kind"],
                "name": name,
                "uid": job["metadata"]["uid"],
                "blockOwnerDeletion": False,
            }
            path = CONFIG_MAP.path(worker.namespace, f"{name}-code")
            if worker.api.exists(path):
                worker.api.patch(path, {"metadata": {"ownerReferences": [ref]}})

    # -- submitting ------------------------------------------------------------------------

    def targets(self, spec: JobSpec) -> list[tuple[str, Any]]:
        """The workers a job of ``spec`` may be dispatched to, with their backends, checked
        before anything is created: one line for a name or context that is not there. [] for
        a job whose queue is not a MultiKueue one."""
        queue = spec.scheduling.kueue_queue
        if not queue:
            return []
        names = self._queue_clusters(str(spec.namespace or self.cluster.namespace), queue)
        if names == []:
            return []
        if names is None:  # not readable here: every configured worker
            names = list(self.contexts)
        self._check_names(names)
        self._check_contexts()
        out = []
        for where in names:
            backend = self.backend(where, spec.name)
            if backend is not None:
                out.append((where, backend))
        return out

    def _check_names(self, queue_workers: list[str]) -> None:
        """Every cluster ``clusters`` names is a MultiKueueCluster of the manager (where they
        may not be listed: a worker of this queue); one line where one is not."""
        try:
            found = self.cluster.api.items(MULTIKUEUE_CLUSTER.path())
            known = {c["metadata"]["name"] for c in found}
        except ClusterError:
            known = set(queue_workers)
        unknown = sorted(set(self.contexts) - known)
        if unknown:
            raise SpecError(
                f"clusters: {', '.join(map(repr, unknown))} is not a MultiKueueCluster of this "
                f"cluster (it has: {', '.join(sorted(known)) or 'none'}): fix "
                "`%ktrain config clusters=NAME=CONTEXT`."
            )

    def _check_contexts(self) -> None:
        """Every context ``clusters`` names is in the kubeconfig; one line where one is not."""
        if not self.contexts:
            return
        from kubernetes import config as kube_config

        path = self.cluster.config.kubeconfig
        try:
            contexts, _active = kube_config.list_kube_config_contexts(config_file=path)
        except Exception as exc:  # the kubeconfig itself: the manager's connection said so
            raise ClusterError(f"clusters: cannot read the kubeconfig ({exc}).") from None
        have = {c["name"] for c in contexts}
        for where, context in self.contexts.items():
            if context not in have:
                raise SpecError(
                    f"clusters: {where}={context}: the kubeconfig has no context {context!r} "
                    f"(it has: {', '.join(sorted(have))})."
                )

    def _queue_clusters(self, namespace: str, queue: str) -> list[str] | None:
        """The MultiKueueClusters of the queue's MultiKueue check ([] for a queue without one);
        None where that cannot be read here."""
        api = self.cluster.api
        try:
            lq = api.find(LOCAL_QUEUE.path(namespace, queue)) or {}
            cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
            if not cq_name:
                return []
            cq = api.find(CLUSTER_QUEUE.path(name=cq_name)) or {}
            spec = cq.get("spec") or {}
            checks = [str(c) for c in spec.get("admissionChecks") or []]
            strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
            checks += [str(c.get("name")) for c in strategy]
            for check in checks:
                ac = api.find(ADMISSION_CHECK.path(name=check)) or {}
                ac_spec = ac.get("spec") or {}
                if ac_spec.get("controllerName") != MULTIKUEUE:
                    continue
                params = ac_spec.get("parameters") or {}
                mkc = api.find(MULTIKUEUE_CONFIG.path(name=str(params.get("name")))) or {}
                return [str(c) for c in (mkc.get("spec") or {}).get("clusters") or []]
        except (Forbidden, Unauthorized):
            return None if self.contexts else []
        return []
