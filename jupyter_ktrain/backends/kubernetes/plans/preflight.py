"""Before anything is created: can this cluster run this job? Every problem, one line each.

Checks, in order: the CRD for the kind is served; the namespace exists; RBAC allows what the
backend will do (one SelfSubjectAccessReview per verb and resource); every PVC, Secret (and
key) and image pull secret the spec names exists; some node advertises the GPUs and RDMA
devices asked for with enough allocatable for all replicas; the Multus
NetworkAttachmentDefinitions an ``--rdma`` profile names exist (a missing one leaves every pod
in ContainerCreating); the Volcano queue or Kueue LocalQueue exists when named.
``run_preflight`` raises one :class:`PreflightError` holding every problem.

What this user may not read (a Kubeflow profile's account reads nothing cluster-wide: no
nodes, no Volcano queues; nor Kueue's LocalQueues under ``kubeflow-edit``) is not a problem:
those checks are skipped and named together in the one warning ``run_preflight`` returns.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from ....errors import PreflightError
from ....kinds import KIND_TABLE
from ....spec.job import JobSpec
from ..client.kube_api import Api
from ..client.resources import (
    LOCAL_QUEUE,
    NETWORK_ATTACHMENT,
    PERSISTENT_VOLUME_CLAIM,
    SECRET,
    SERVICE_MONITOR,
    job_resource,
)
from ..client.retries import ApiFailure, Forbidden

__all__ = [
    "Access",
    "multus_networks",
    "required_access",
    "run_preflight",
    "serves_service_monitors",
]

INSTALL_HINT = {
    "kubeflow.org": "install the Kubeflow Training Operator (kubectl apply --server-side -k "
    '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.8.1")',
    "trainer.kubeflow.org": "install Kubeflow Trainer v2 (kubeflow.org/docs/components/trainer)",
    "ray.io": "install the KubeRay operator (its Helm chart kuberay/kuberay-operator, v1.6+)",
}


@dataclass(frozen=True)
class Access:
    verb: str
    resource: str
    group: str = ""
    subresource: str = ""

    def describe(self) -> str:
        res = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{self.verb} {res}{'/' + self.subresource if self.subresource else ''}"


def required_access(
    spec: JobSpec, configmap: bool, service: bool = False, service_monitor: bool = False
) -> list[Access]:
    job = job_resource(KIND_TABLE[spec.kind])
    group, plural = job.group, job.plural
    out = [Access("create", plural, group), Access("get", plural, group)]
    out += [Access("list", plural, group), Access("watch", plural, group)]
    if configmap:
        out += [Access("create", "configmaps"), Access("patch", "configmaps")]
    if service:  # the metrics Service (created, then owned by the job)
        out += [Access("create", "services"), Access("patch", "services")]
    if spec.warm:  # each run updates the ConfigMap and goes to the pods signed, by exec
        out += [Access(v, "secrets") for v in ("create", "patch", "get")]  # the job's key
        out += [Access(v, "configmaps") for v in ("get", "update")]
        # the client's exec is a WebSocket: a GET (get), authorized as create as well
        out += [Access(v, "pods", subresource="exec") for v in ("create", "get")]
    if service_monitor:
        mon = SERVICE_MONITOR
        out += [Access("create", mon.plural, mon.group), Access("patch", mon.plural, mon.group)]
    out += [Access(v, "pods") for v in ("get", "list", "watch")]
    out += [Access("get", "pods", subresource="log")]
    out += [Access("list", "events"), Access("watch", "events")]
    return out


def serves_service_monitors(api: Api) -> bool:
    """Whether the Prometheus operator's ServiceMonitor API is served (its CRDs exist)."""
    try:
        served = api.find(f"/apis/{SERVICE_MONITOR.api_version}")
    except Forbidden:
        return False
    resources = (served or {}).get("resources") or []
    return any(r.get("name") == SERVICE_MONITOR.plural for r in resources)


def run_preflight(
    api: Api,
    spec: JobSpec,
    namespace: str,
    configmap: bool,
    service: bool = False,
    service_monitor: bool = False,
) -> list[str]:
    """Raise PreflightError with every problem; return the warnings: at most one line naming
    every check skipped because this user may not read what it reads.

    The checks are independent reads, so they run concurrently: the preflight costs about one
    round trip, not one per check. Problems are reported in a fixed order.
    """
    # what each check could not read (short names), in a fixed order: nodes first
    skipped: dict[str, list[str]] = {k: [] for k in ("nodes", "refs", "queues", "networks")}
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="ktrain-preflight") as pool:
        crd = pool.submit(_crd, api, spec)
        ns = pool.submit(_namespace, api, namespace)
        rbac = [
            pool.submit(_access, api, access, namespace)
            for access in required_access(spec, configmap, service, service_monitor)
        ]
        refs = pool.submit(_references, api, spec, namespace, skipped["refs"])
        queues = pool.submit(_queues, api, spec, namespace, skipped["queues"])
        networks = pool.submit(_networks, api, spec, namespace, skipped["networks"])
        nodes = pool.submit(_nodes, api, spec, skipped["nodes"])
        exists = ns.result()
        problems = crd.result() + _namespace_problems(exists, [c.result() for c in rbac], namespace)
        if exists is not False:  # in a missing namespace every reference is missing
            problems += refs.result() + queues.result() + networks.result()
        problems += nodes.result()
    if problems:
        raise PreflightError(problems)
    in_namespace = [] if exists is False else [*skipped["refs"], *skipped["queues"]]
    return unchecked_line([*skipped["nodes"], *in_namespace, *skipped["networks"]])


def unchecked_line(skipped: list[str]) -> list[str]:
    """The one warning for the checks skipped (RBAC), or none."""
    if not skipped:
        return []
    return [
        f"not checked, as you may not read them: {'; '.join(skipped)}. The job is submitted "
        "without these checks."
    ]


def _crd(api: Api, spec: JobSpec) -> list[str]:
    job = job_resource(KIND_TABLE[spec.kind])
    resources = (api.find(f"/apis/{job.api_version}") or {}).get("resources") or []
    if any(r.get("name") == job.plural for r in resources):
        return []
    return [
        f"the cluster does not serve {spec.kind} ({job.qualified}/{job.version}): "
        f"{INSTALL_HINT.get(job.group, 'install its operator')}, or pick another --kind."
    ]


def _namespace(api: Api, namespace: str) -> bool | None:
    """Whether the namespace exists; None when this user may not read namespaces."""
    try:
        return api.find(f"/api/v1/namespaces/{namespace}") is not None
    except Forbidden:
        return None


def _namespace_problems(exists: bool | None, denials: list[list[str]], namespace: str) -> list[str]:
    """One sentence when the namespace is missing (every permission there is denied too), or
    when it cannot be read and nothing at all is allowed in it; else the RBAC denials."""
    fix = "pass --namespace or `%ktrain config namespace=NAME`"
    if exists is False:
        return [
            f"namespace {namespace!r} does not exist: create it (kubectl create namespace "
            f"{namespace}) or {fix}."
        ]
    if exists is None and len(denials) > 1 and all(denials):
        return [
            f"you may do nothing this job needs in namespace {namespace!r}: it does not exist, "
            f"or no Role there is bound to you. Check the name (kubectl get namespaces, or ask "
            f"an admin) or {fix}."
        ]
    return [problem for denied in denials for problem in denied]


def may(api: Api, namespace: str, *accesses: Access) -> bool:
    """Whether this user may do all of ``accesses`` in ``namespace`` (SelfSubjectAccessReview)."""
    return not any(_access(api, a, namespace) for a in accesses)


def _access(api: Api, access: Access, namespace: str) -> list[str]:
    attrs = {"namespace": namespace, "verb": access.verb, "resource": access.resource}
    if access.group:
        attrs["group"] = access.group
    if access.subresource:
        attrs["subresource"] = access.subresource
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attrs},
    }
    answer = api.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review)
    if (answer.get("status") or {}).get("allowed"):
        return []
    res = access.describe().split(" ", 1)[1]
    return [
        f"RBAC: you may not {access.verb} {res} in namespace {namespace!r}: ask an "
        f"admin for a Role granting it (kubectl create role ktrain -n {namespace} "
        f"--verb={access.verb} --resource={res}) and a RoleBinding to you."
    ]


def _get(api: Api, path: str, warnings: list[str], what: str) -> dict[str, Any] | None:
    """The object, {} when it cannot be checked (403: ``what`` goes to ``warnings``), None
    when it does not exist."""
    try:
        found: dict[str, Any] | None = api.find(path)
    except Forbidden:
        warnings.append(what)
        return {}
    return found


def _references(api: Api, spec: JobSpec, namespace: str, warnings: list[str]) -> list[str]:
    out = []
    for m in spec.storage.mounts:
        path = PERSISTENT_VOLUME_CLAIM.path(namespace, m.claim)
        if _get(api, path, warnings, f"PVC {m.claim}") is None:
            out.append(
                f"PersistentVolumeClaim {m.claim!r} (from {m.flag} {m.claim}:{m.path}) does not "
                f"exist in {namespace!r}: create it, or fix the claim name."
            )
    secrets: dict[str, list[tuple[str, str]]] = {}
    for s in spec.secret_env:
        secrets.setdefault(s.secret, []).append(
            (s.key, f"--secret-env {s.name}={s.secret}/{s.key}")
        )
    for name in spec.env_from_secrets:
        secrets.setdefault(name, []).append(("", f"--env-from-secret {name}"))
    for name in spec.scheduling.image_pull_secrets:
        secrets.setdefault(name, []).append(("", f"--image-pull-secret {name}"))
    for name, uses in secrets.items():
        obj = _get(api, SECRET.path(namespace, name), warnings, f"Secret {name}")
        if obj is None:
            flags = ", ".join(flag for _key, flag in uses)
            out.append(
                f"Secret {name!r} (from {flags}) does not exist in {namespace!r}: create it "
                f"(kubectl create secret generic {name} -n {namespace} --from-literal=KEY=...)."
            )
            continue
        if not obj:
            continue
        keys = set(obj.get("data") or {}) | set(obj.get("stringData") or {})
        for key, flag in uses:
            if key and key not in keys:
                have = ", ".join(sorted(keys)) or "none"
                out.append(
                    f"Secret {name!r} has no key {key!r} (from {flag}; its keys: {have}): "
                    "fix the key, or add it to the Secret."
                )
    return out


def _queues(api: Api, spec: JobSpec, namespace: str, warnings: list[str]) -> list[str]:
    out = []
    s = spec.scheduling
    if s.queue:
        try:
            there: bool | None = api.exists(f"/apis/scheduling.volcano.sh/v1beta1/queues/{s.queue}")
        except Forbidden:
            # a user who may not read cluster-scoped queues gets 403 whether or not Volcano is
            # there: discovery (readable by everyone) tells which
            there = None if api.exists("/apis/scheduling.volcano.sh") else False
        if there is False:
            out.append(
                f"Volcano queue {s.queue!r} (--queue) does not exist (or Volcano is not "
                f"installed): create it (vcctl queue create -n {s.queue}) or drop --queue."
            )
        elif there is None:  # the job waits if it does not exist
            warnings.append(f"Volcano queue {s.queue!r} (--queue)")
    if s.kueue_queue:
        problem = _kueue_queue_problem(api, namespace, s.kueue_queue, warnings)
        if problem:
            out.append(problem)
    return out


def _kueue_queue_problem(api: Api, namespace: str, queue: str, warnings: list[str]) -> str:
    """Why ``--kueue-queue QUEUE`` would never be admitted, or "": Kueue not installed (its API
    group not served), or no such LocalQueue in the namespace (with the ones there). A user
    who may not read LocalQueues (403) gets it named in ``warnings`` instead."""
    group = LOCAL_QUEUE.group
    version = next((v for v in ("v1beta2", "v1beta1") if api.exists(f"/apis/{group}/{v}")), None)
    if version is None:
        return (
            f"--kueue-queue {queue}: Kueue is not installed on this cluster (it serves no "
            f"{group} API), so the job would never be admitted: drop --kueue-queue, or ask an "
            "admin to install Kueue."
        )
    what = f"Kueue LocalQueue {queue!r} (--kueue-queue)"
    queues = replace(LOCAL_QUEUE, version=version)
    path = queues.path(namespace, queue)
    if _get(api, path, warnings, what) is not None:  # there, or not readable (named)
        return ""
    try:
        items = api.items(queues.path(namespace))
        names = sorted(str(i["metadata"]["name"]) for i in items)
    except ApiFailure:
        names = []
    there = f"its LocalQueues are {', '.join(names)}" if names else "it has no LocalQueue"
    return (
        f"Kueue LocalQueue {queue!r} (--kueue-queue) does not exist in namespace "
        f"{namespace!r} ({there}): pick one of them, ask an admin to create it, or drop "
        "--kueue-queue."
    )


MULTUS_API = "/apis/k8s.cni.cncf.io/v1"


def multus_networks(annotation: str) -> list[tuple[str | None, str]]:
    """(namespace or None, name) of each network in a ``k8s.v1.cni.cncf.io/networks`` value:
    ``[ns/]name[@iface]`` items separated by commas, or a JSON list of selection objects."""
    text = annotation.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            return []
        return [
            (i.get("namespace"), str(i["name"]))
            for i in items
            if isinstance(i, dict) and i.get("name")
        ]
    out: list[tuple[str | None, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        ref = item.split("@", 1)[0]
        ns, _, name = ref.rpartition("/")
        out.append((ns or None, name))
    return out


def _networks(api: Api, spec: JobSpec, namespace: str, warnings: list[str]) -> list[str]:
    rdma = spec.rdma
    if rdma is None or not rdma.networks:
        return []
    wanted = multus_networks(rdma.networks)
    if not wanted:
        return []
    if not api.exists(MULTUS_API):  # discovery: readable by every user
        return [
            f"--rdma {rdma.name} attaches Multus network {rdma.networks!r}, but the cluster "
            "does not serve NetworkAttachmentDefinitions (Multus is not installed): ask an "
            "admin to install Multus and the RDMA network, or use --rdma tcp."
        ]
    out = []
    for ns, name in wanted:
        where = ns or namespace
        path = NETWORK_ATTACHMENT.path(where, name)
        if _get(api, path, warnings, f"NetworkAttachmentDefinition {where}/{name}") is None:
            out.append(
                f"NetworkAttachmentDefinition {name!r} (the Multus network of --rdma "
                f"{rdma.name}) does not exist in {where!r}, so every pod would wait in "
                "ContainerCreating: ask an admin to create it there (kubectl get "
                "network-attachment-definitions -A lists the networks there are), or name "
                "yours in an --rdma profile file (networks: NAMESPACE/NAME)."
            )
    return out


def _wanted(spec: JobSpec) -> dict[str, int]:
    want: dict[str, int] = {}
    if spec.resources.gpus:
        want[spec.resources.gpu_resource] = spec.resources.gpus
    if spec.rdma is not None and spec.rdma.resource:
        want[spec.rdma.resource] = spec.rdma.resource_count
    return want


def _quantity(text: Any) -> int:
    try:
        return int(str(text))
    except ValueError:
        return 0


def _nodes(api: Api, spec: JobSpec, warnings: list[str]) -> list[str]:
    want = _wanted(spec)
    if not want:
        return []
    try:
        nodes = api.items("/api/v1/nodes")
    except Forbidden:
        warnings.append(f"whether a node offers {_describe(want)} per pod (nodes)")
        return []
    selector = dict(spec.scheduling.node_selector)
    nodes = [n for n in nodes if _matches(n, selector)]
    fits = 0
    advertised = set()
    for node in nodes:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        advertised |= {r for r in want if _quantity(alloc.get(r, 0)) > 0}
        fits += min(_quantity(alloc.get(r, 0)) // n for r, n in want.items())
    missing = [r for r in want if r not in advertised]
    where = f" matching --node-selector {selector}" if selector else ""
    if missing:
        return [
            f"no node{where} advertises {', '.join(missing)}: this cluster cannot run pods that "
            f"ask for {_describe(want)}; change --gpus-per-node/--rdma, or ask an admin to "
            "install the device plugin."
        ]
    if fits < spec.nodes:
        return [
            f"only {fits} of {spec.nodes} replicas fit: no {spec.nodes} node slots{where} each "
            f"have {_describe(want)} allocatable; use fewer --nodes or --gpus-per-node."
        ]
    return []


def _describe(want: dict[str, int]) -> str:
    return ", ".join(f"{n} {r}" for r, n in want.items())


def _matches(node: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
