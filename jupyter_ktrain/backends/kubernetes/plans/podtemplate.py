"""The one pod-template builder every kind shares (PyTorchJob, TFJob, MPIJob, TrainJob).

Pure: a :class:`~jupyter_ktrain.spec.job.JobSpec` and a :class:`CodeSource` in, a plain
``PodTemplateSpec`` dict out. Kind wrappers (:mod:`.builders`) only choose the container name,
the command and whether the pod trains (GPUs, RDMA devices, /dev/shm) or only launches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....pod.checkpoint.plain import CHECKPOINTS_ENV
from ....pod.launch import CODE_DIR, WARM_DIR
from ....spec.deepspeed import CONFIG_ENV, CONFIG_PATH
from ....spec.job import JobSpec
from ..labels import CELL_LABEL, JOB_LABEL, KIND_LABEL, MANAGED_BY
from .placement import topology_annotations
from .scrape import METRICS_PORT_NAME, metrics_env

__all__ = [
    "MULTUS_ANNOTATION",
    "CodeSource",
    "PodRole",
    "env_list",
    "job_labels",
    "pod_template",
]

KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
MULTUS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
ISTIO_ANNOTATION = "sidecar.istio.io/inject"
CODE_VOLUME = "ktrain-code"
SHM_VOLUME = "dshm"
WARM_VOLUME = "ktrain-warm"  # a warm pod's run folder


@dataclass(frozen=True)
class CodeSource:
    """How the job's code reaches ``mount_path`` (``/ktrain``) in every pod.

    - image route (default): ``image`` is the base image with the code layer appended by the
      packager (``None`` means ``spec.image`` already holds the code);
    - ConfigMap route: ``volume`` is a Volume source mounted at ``mount_path``, e.g.
      ``CodeSource.configmap("bert-ft-1-code")``.

    ``env`` is extra environment the packaging route needs (e.g. ``PYTHONPATH``). The files
    :func:`~.manifests.render` returns in ``Rendered.files`` must be shipped into the same
    directory by whichever route is used.
    """

    image: str | None = None
    volume: Mapping[str, Any] | None = None
    mount_path: str = CODE_DIR
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def configmap(
        cls, name: str, *, image: str | None = None, items: list[dict[str, str]] | None = None
    ) -> CodeSource:
        source: dict[str, Any] = {"name": name}
        if items:
            source["items"] = items
        return cls(image=image, volume={"configMap": source})


@dataclass(frozen=True)
class PodRole:
    """What a kind asks of one replica type's pods."""

    container: str
    command: list[str] | None
    trains: bool = True
    resources: Mapping[str, Mapping[str, str]] | None = None
    extra_env: tuple[tuple[str, str], ...] = field(default=())
    # (env var, Secret, key): values the pod reads from a Secret (a warm job's key)
    secret_env: tuple[tuple[str, str, str], ...] = field(default=())
    # the pod talks to the API server with its ServiceAccount's token (an MPIJob's launcher
    # runs `kubectl exec`); every other pod gets no token unless --service-account names one
    api_access: bool = False


def job_labels(spec: JobSpec, cell: str | None) -> dict[str, str]:
    """Labels on the job and its pods: ours first (find the job and its cell), then the user's."""
    labels = {JOB_LABEL: spec.name, KIND_LABEL: spec.kind.lower(), MANAGED_BY[0]: MANAGED_BY[1]}
    if cell:
        labels[CELL_LABEL] = cell
    labels.update(spec.labels)
    return labels


def env_list(
    spec: JobSpec,
    code: CodeSource,
    extra: tuple[tuple[str, str], ...] = (),
    secret_refs: tuple[tuple[str, str, str], ...] = (),
) -> list[dict[str, Any]]:
    """Container env: RDMA profile, then ``--env`` (wins over the profile), secrets, ktrain.
    ``ktrain.checkpoint()`` finds the ``--checkpoints`` mount through ``KTRAIN_CHECKPOINTS``."""
    values: dict[str, str] = {}
    for m in spec.storage.mounts:
        if m.name == "checkpoints":
            values[CHECKPOINTS_ENV] = m.path
    if spec.rdma is not None:
        values.update(spec.rdma.nccl_env)
        # the agent reports NCCL's transport (and warns on a socket fallback) when set
        values["KTRAIN_RDMA"] = spec.rdma.name
    values.update(spec.env)
    if spec.deepspeed is not None:
        values[CONFIG_ENV] = CONFIG_PATH.replace(CODE_DIR, code.mount_path, 1)
    values.update(code.env)
    values.update(extra)
    out: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in values.items()]
    out += [
        {"name": s.name, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for s in spec.secret_env
    ]
    out += [
        {"name": n, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for n, secret, key in secret_refs
    ]
    return out


def _resources(spec: JobSpec) -> dict[str, dict[str, str]]:
    r = spec.resources
    devices: dict[str, str] = {}
    if r.gpus:
        devices[r.gpu_resource] = str(r.gpus)
    if spec.rdma is not None and spec.rdma.resource:
        devices[spec.rdma.resource] = str(spec.rdma.resource_count)
    limits = dict(devices)
    requests = dict(devices)
    for key, req, lim in (("cpu", r.cpu, r.cpu_limit), ("memory", r.memory, r.memory_limit)):
        if lim is not None:
            limits[key] = lim
        if req is not None:
            requests[key] = req
    out: dict[str, dict[str, str]] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def _pvc_mounts(spec: JobSpec) -> list[dict[str, Any]]:
    out = []
    for m in spec.storage.mounts:
        mount: dict[str, Any] = {"name": m.volume_name, "mountPath": m.path}
        if m.read_only:
            mount["readOnly"] = True
        if m.sub_path:
            mount["subPath"] = m.sub_path
        out.append(mount)
    return out


def _volumes(spec: JobSpec, code: CodeSource, shm: str | None) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = []
    if code.volume is not None:
        vols.append({"name": CODE_VOLUME, **code.volume})
    for m in spec.storage.mounts:
        # read-only is set on the mount: the same claim may be written by an init container
        vols.append({"name": m.volume_name, "persistentVolumeClaim": {"claimName": m.claim}})
    if shm is not None:
        vols.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm}})
    if spec.warm:
        vols.append({"name": WARM_VOLUME, "emptyDir": {}})
    return vols


def _container(spec: JobSpec, code: CodeSource, role: PodRole, shm: str | None) -> dict[str, Any]:
    image = code.image or spec.image
    c: dict[str, Any] = {"name": role.container, "image": image}
    if role.command is not None:
        c["command"] = list(role.command)
    env = env_list(spec, code, (*role.extra_env, *metrics_env(spec)), role.secret_env)
    if env:
        c["env"] = env
    if spec.metrics_port is not None and role.command is not None:  # the agent serves it
        c["ports"] = [
            {"name": METRICS_PORT_NAME, "containerPort": spec.metrics_port, "protocol": "TCP"}
        ]
    if spec.env_from_secrets:
        c["envFrom"] = [{"secretRef": {"name": s}} for s in spec.env_from_secrets]
    resources = role.resources if role.resources is not None else _resources(spec)
    if role.trains and resources:
        c["resources"] = {k: dict(v) for k, v in resources.items()}
    elif not role.trains and role.resources:
        c["resources"] = {k: dict(v) for k, v in role.resources.items()}
    if role.trains and spec.rdma is not None and spec.rdma.ipc_lock:
        c["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    mounts = []
    if code.volume is not None:
        mounts.append({"name": CODE_VOLUME, "mountPath": code.mount_path, "readOnly": True})
    mounts += _pvc_mounts(spec)
    if shm is not None:
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if spec.warm:
        mounts.append({"name": WARM_VOLUME, "mountPath": WARM_DIR})
    if mounts:
        c["volumeMounts"] = mounts
    return c


def _init_containers(spec: JobSpec) -> list[dict[str, Any]]:
    out = []
    for ic in spec.scheduling.init_containers:
        c: dict[str, Any] = {"name": ic.name, "image": ic.image}
        if ic.command:
            c["command"] = list(ic.command)
        # writable: an init container typically fills the dataset the trainers read
        mounts = [{k: v for k, v in m.items() if k != "readOnly"} for m in _pvc_mounts(spec)]
        if mounts:
            c["volumeMounts"] = mounts
        out.append(c)
    return out


def pod_spec(spec: JobSpec, code: CodeSource, role: PodRole) -> dict[str, Any]:
    """The ``PodSpec`` of one replica type."""
    s = spec.scheduling
    shm = spec.storage.shm_size(spec.resources.gpus) if role.trains else None
    ps: dict[str, Any] = {}
    if spec.rdma is not None and spec.rdma.host_network:
        ps["hostNetwork"] = True
        ps["dnsPolicy"] = "ClusterFirstWithHostNet"
    if s.service_account:
        ps["serviceAccountName"] = s.service_account
    elif not role.api_access:  # training code gets no API token it did not ask for
        ps["automountServiceAccountToken"] = False
    if s.gang == "volcano":
        ps["schedulerName"] = "volcano"
    if s.priority_class:
        ps["priorityClassName"] = s.priority_class
    if s.node_selector:
        ps["nodeSelector"] = dict(s.node_selector)
    if s.tolerations:
        ps["tolerations"] = [t.to_k8s() for t in s.tolerations]
    if s.affinity is not None:
        ps["affinity"] = _plain(s.affinity)
    if s.image_pull_secrets:
        ps["imagePullSecrets"] = [{"name": n} for n in s.image_pull_secrets]
    inits = _init_containers(spec)
    if inits:
        ps["initContainers"] = inits
    ps["containers"] = [_container(spec, code, role, shm)]
    vols = _volumes(spec, code, shm)
    if vols:
        ps["volumes"] = vols
    return ps


def pod_template(
    spec: JobSpec, code: CodeSource, role: PodRole, labels: Mapping[str, str]
) -> dict[str, Any]:
    """A ``PodTemplateSpec``: labels, annotations (Multus network, no Istio sidecar), spec."""
    annotations = {ISTIO_ANNOTATION: "false"}
    if spec.rdma is not None and spec.rdma.networks and role.trains:
        annotations[MULTUS_ANNOTATION] = spec.rdma.networks
    if role.trains:  # the pods of the collective: Kueue places them in one domain
        annotations.update(topology_annotations(spec))
    return {
        "metadata": {"labels": dict(labels), "annotations": annotations},
        "spec": pod_spec(spec, code, role),
    }


def _plain(value: Any) -> Any:
    """A deep copy made of dicts and lists (affinity arrives as any Mapping/Sequence)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
