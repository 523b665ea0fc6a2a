"""The builders of the job kinds in :data:`jupyter_ktrain.kinds.KIND_TABLE`, registered by
name: PyTorchJob, TFJob, MPIJob, XGBoostJob (kubeflow.org/v1), Kubeflow Trainer v2 TrainJob
(trainer.kubeflow.org/v1alpha1) and KubeRay's RayJob (ray.io/v1), each a wrapper around the
shared pod template. Pure functions of a spec; what a kind is (API, container, replica types
and their restart policies) comes from the table.

Every replica runs the same command (:func:`jupyter_ktrain.pod.launch.node_command`: the agent
wrapping what the kind's ``launcher`` names) except where a framework needs otherwise: a TFJob
or XGBoostJob replica runs one process (TensorFlow reads ``TF_CONFIG``, XGBoost the operator's
``MASTER_ADDR``/``RANK``), an MPIJob's launcher runs ``mpirun``, which starts the ranks in
the workers itself, and a RayJob's pods run KubeRay's ``ray start`` (the program is the job's
entrypoint).
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ....errors import SpecError
from ....kinds import KIND_TABLE, JobKind
from ....pod.agent.peers import PEERS_ENV
from ....pod.agent.relaunch import MAX_RESTARTS_ENV
from ....pod.launch import node_command, warm_command
from ....pod.mpi import OPEN_MPI_5_ENV
from ....spec.job import JobSpec
from ..labels import HANG_AFTER_ANNOTATION, PATCH_MANAGER
from .placement import group_pod_sets
from .podtemplate import KUEUE_LABEL, CodeSource, PodRole, pod_template
from .run_policy import (
    CLEAN_POD_POLICY,
    SELF_STOPPING,
    clean_pod_policy,
    stops_itself,
    with_run_policy,
)

__all__ = [
    "BUILDERS",
    "CLEAN_POD_POLICY",
    "LAUNCHER_RESOURCES",
    "SELF_STOPPING",
    "builder",
    "clean_pod_policy",
    "mpi_launcher_command",
    "replica_command",
    "single_process_command",
    "stops_itself",
]

Builder = Callable[[JobSpec, CodeSource, dict[str, str]], dict[str, Any]]
BUILDERS: dict[str, Builder] = {}


def _registered(build: Builder) -> Builder:
    """Register ``build`` under its name (a :class:`~jupyter_ktrain.kinds.JobKind`'s
    ``builder``)."""
    BUILDERS[build.__name__] = build
    return build


def builder(kind: JobKind) -> Builder:
    """The function that renders ``kind``'s job object."""
    return BUILDERS[kind.builder]


LAUNCHER_RESOURCES = {"limits": {"cpu": "2", "memory": "4Gi"}}
TRAINJOB_TARGET = "node"


def replica_command(
    kind: JobKind, code_dir: str, python: str = "python", gpus: bool = True
) -> list[str]:
    """What every replica of ``kind`` runs: the agent and the kind's ``launcher`` (``gpus``
    False: a job that asked for none, whose agents sample no GPU and say nothing of it)."""
    return node_command(code_dir, python, launcher=kind.launcher, gpus=gpus)


def single_process_command(code_dir: str, python: str = "python", gpus: bool = True) -> list[str]:
    """One process per replica under the agent (TFJob: TensorFlow reads TF_CONFIG)."""
    return node_command(code_dir, python, launcher="single", gpus=gpus)


def mpi_launcher_command(spec: JobSpec, code_dir: str, python: str = "python") -> list[str]:
    """``mpirun`` for the launcher: one rank per slot, each through the agent in its worker pod
    (its env comes from the pod; rank 0's address from the launcher, see
    ``jupyter_ktrain.pod.mpi``)."""
    gpus = bool(spec.resources.gpus)
    return node_command(code_dir, python, launcher="mpirun", processes=spec.world_size, gpus=gpus)


def _metadata(spec: JobSpec, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": spec.name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    job_labels = dict(labels)
    if spec.scheduling.kueue_queue:
        job_labels[KUEUE_LABEL] = spec.scheduling.kueue_queue
    meta["labels"] = job_labels
    if spec.hang_after is not None:  # a detached job's hang is said by this limit too
        meta["annotations"] = {HANG_AFTER_ANNOTATION: f"{spec.hang_after:g}"}
    return meta


def _replica(spec: JobSpec, rtype: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    """One replica type; each gets its own copy of the template (no shared dicts, no YAML
    aliases, and a caller may edit one replica type without touching the others), and its
    restart policy (``--restart-policy``, else the kind's default for the type)."""
    return {
        "replicas": replicas,
        "restartPolicy": spec.run_policy.restart_policy_for(spec.kind, rtype),
        "template": copy.deepcopy(template),
    }


def _object(spec: JobSpec, labels: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    key = KIND_TABLE[spec.kind].replica_key
    if key and key in body:  # a head and its workers: one Kueue pod-set group
        group_pod_sets(r["template"] for r in body[key].values())
    return {
        "apiVersion": KIND_TABLE[spec.kind].api_version,
        "kind": spec.kind,
        "metadata": _metadata(spec, labels),
        "spec": body,
    }


# torchrun's agent shares its rendezvous store with the ranks by default, and a rank-0 agent
# that survives a restart never publishes that store's address in the next round: a
# replacement pod waits for it until the read timeout and the job fails (pytorch/pytorch
# issue 135712). With a store per round, the replacement rejoins.
ELASTIC_ENV = (("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1"),)

# A node that goes away (its pod deleted, preempted, evicted) does not leave the c10d
# rendezvous: torchrun stopped by a signal keeps it open for the next round and never takes
# itself out, so the others admit its replacement only once its keep-alive heartbeat expired,
# ``keep_alive_interval`` x ``keep_alive_max_attempt`` after the last one (torch's default
# 5 s x 3: a deleted pod's replacement, up in 2 s, waited about 13 s more; bench/recovery.py).
# Every 2 s x 3 it waits about 5 s at most; a heartbeat is one compare-and-set on the
# rendezvous store per node, and an agent stalled 6 s by a loaded node is still rare.
# The operator passes ``rdzvConf`` to torchrun as ``PET_RDZV_CONF``, after the container's own
# environment (so it would win over a ``--env PET_RDZV_CONF=...``: that is merged in instead).
ELASTIC_RDZV_CONF = (("keep_alive_interval", "2"), ("keep_alive_max_attempt", "3"))
RDZV_CONF_ENV = "PET_RDZV_CONF"


def _rdzv_conf(spec: JobSpec) -> tuple[list[dict[str, str]], JobSpec]:
    """The elastic policy's ``rdzvConf``: ours, with the keys of the user's ``--env
    PET_RDZV_CONF=K=V,K=V`` over them; and ``spec`` without that variable (one source)."""
    conf = dict(ELASTIC_RDZV_CONF)
    raw = dict(spec.env).get(RDZV_CONF_ENV)
    if raw is not None:
        for item in filter(None, (part.strip() for part in raw.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise SpecError(
                    f"--env {RDZV_CONF_ENV}={raw!r}: {item!r} is not KEY=VALUE; write e.g. "
                    f"--env {RDZV_CONF_ENV}=last_call_timeout=5,join_timeout=900"
                )
            conf[key.strip()] = value.strip()
        spec = spec.evolve(env=tuple(p for p in spec.env if p[0] != RDZV_CONF_ENV))
    return [{"key": k, "value": v} for k, v in conf.items()], spec


@_registered
def pytorchjob(spec: JobSpec, code: CodeSource, labels: dict[str, str]) -> dict[str, Any]:
    """Master + Workers (static rendezvous), or Workers only with an elasticPolicy (c10d):
    torchrun restarts the ranks of the pods that live on (``--max-restarts``, default the
    job's) and they rendezvous again with the pods made anew."""
    kind = KIND_TABLE[spec.kind]
    rdzv_conf: list[dict[str, str]] = []
    if spec.elastic is not None:
        rdzv_conf, spec = _rdzv_conf(spec)
    extra = tuple(p for p in ELASTIC_ENV if p[0] not in dict(spec.env)) if spec.elastic else ()
    if stops_itself(spec):  # its nodes stop each other when one fails (cleanPodPolicy None)
        extra = (*extra, (PEERS_ENV, "1"))
    role = PodRole(
        container=kind.container,
        command=replica_command(kind, code.mount_path, gpus=bool(spec.resources.gpus)),
        extra_env=extra,
    )
    if spec.warm:  # the warm agent; its runs come through the job's code ConfigMap
        from ..warm.orders import IDLE_TTL_S, warm_env, warm_key_env

        role = replace(
            role,
            command=warm_command(),
            extra_env=warm_env(f"{spec.name}-code"),
            secret_env=warm_key_env(spec.name),
        )
        if spec.run_policy.ttl_seconds_after_finished is None:
            spec = spec.evolve(
                run_policy=replace(spec.run_policy, ttl_seconds_after_finished=IDLE_TTL_S)
            )
    template = pod_template(spec, code, role, labels)
    if spec.warm:
        from ..warm.orders import warm_port

        port = {"name": "pytorchjob-port", "containerPort": warm_port(spec.name), "protocol": "TCP"}
        template["spec"]["containers"][0].setdefault("ports", []).append(port)
    body: dict[str, Any] = {}
    if spec.elastic is not None:
        e = spec.elastic
        restarts = spec.run_policy.max_restarts if e.max_restarts is None else e.max_restarts
        body["elasticPolicy"] = {
            "rdzvBackend": "c10d",
            "rdzvConf": rdzv_conf,
            "minReplicas": e.min_nodes,
            "maxReplicas": e.max_nodes,
            "maxRestarts": restarts,
        }
        replicas = {"Worker": _replica(spec, "Worker", spec.nodes, template)}
    else:
        replicas = {"Master": _replica(spec, "Master", 1, template)}
        if spec.nodes > 1:
            replicas["Worker"] = _replica(spec, "Worker", spec.nodes - 1, template)
    body["nprocPerNode"] = str(spec.nproc)
    body = with_run_policy(body, spec, spec.nodes)
    body[str(kind.replica_key)] = replicas
    return _object(spec, labels, body)


@_registered
def tfjob(spec: JobSpec, code: CodeSource, labels: dict[str, str]) -> dict[str, Any]:
    """Chief + Workers (+ parameter servers with ``--ps N``); every replica is a node of the
    word (:func:`stops_itself`; the chief is node 0)."""
    kind = KIND_TABLE[spec.kind]
    extra = ((PEERS_ENV, "1"),) if stops_itself(spec) else ()  # (cleanPodPolicy None)
    role = PodRole(
        container=kind.container,
        command=replica_command(kind, code.mount_path, gpus=bool(spec.resources.gpus)),
        extra_env=extra,
    )
    template = pod_template(spec, code, role, labels)
    replicas = _head_and_workers(spec, "Chief", template)
    if spec.ps_replicas:
        ps_role = PodRole(
            container=kind.container,
            command=role.command,
            trains=False,
            resources=_cpu_only(spec),
            extra_env=extra,
        )
        replicas["PS"] = _replica(
            spec, "PS", spec.ps_replicas, pod_template(spec, code, ps_role, labels)
        )
    body = with_run_policy({}, spec, spec.nodes + spec.ps_replicas)
    body[str(kind.replica_key)] = replicas
    return _object(spec, labels, body)


@_registered
def xgboostjob(spec: JobSpec, code: CodeSource, labels: dict[str, str]) -> dict[str, Any]:
    """Master (rank 0) + Workers, one process each: the operator gives every replica
    ``MASTER_ADDR``/``MASTER_PORT`` (the Master's Service and its ``xgboostjob-port``, 9999 by
    default), ``WORLD_SIZE`` and ``RANK``, where rank 0 starts XGBoost's collective tracker."""
    kind = KIND_TABLE[spec.kind]
    extra = ((PEERS_ENV, "1"),) if stops_itself(spec) else ()  # (cleanPodPolicy None)
    role = PodRole(
        container=kind.container,
        command=replica_command(kind, code.mount_path, gpus=bool(spec.resources.gpus)),
        extra_env=extra,
    )
    replicas = _head_and_workers(spec, "Master", pod_template(spec, code, role, labels))
    body = with_run_policy({}, spec, spec.nodes)
    body[str(kind.replica_key)] = replicas
    return _object(spec, labels, body)


RAY_WORKER_GROUP = "worker"


@_registered
def rayjob(spec: JobSpec, code: CodeSource, labels: dict[str, str]) -> dict[str, Any]:
    """A head and ``nodes - 1`` workers (one worker group of fixed size), which KubeRay starts
    with its own ``ray start`` commands (the containers have none of ours), and the program as
    the job's entrypoint: the driver, one process under the agent, which Ray's job supervisor
    runs on the head. The code reaches every pod as for the other kinds (a task's function may
    import it); KubeRay deletes the Ray cluster once the job ends (``shutdownAfterJobFinishes``).
    """
    kind = KIND_TABLE[spec.kind]
    role = PodRole(container=kind.container, command=None, extra_env=kind.driver_env)
    template = pod_template(spec, code, role, labels)
    cluster: dict[str, Any] = {
        "headGroupSpec": {"rayStartParams": {}, "template": copy.deepcopy(template)}
    }
    if spec.nodes > 1:
        workers = spec.nodes - 1
        cluster["workerGroupSpecs"] = [
            {
                "groupName": RAY_WORKER_GROUP,
                "replicas": workers,
                "minReplicas": workers,
                "maxReplicas": workers,
                "rayStartParams": {},
                "template": copy.deepcopy(template),
            }
        ]
    group_pod_sets([cluster["headGroupSpec"]["template"]] +
                   [g["template"] for g in cluster.get("workerGroupSpecs", [])])  # fmt: skip
    body: dict[str, Any] = {
        "entrypoint": shlex.join(
            single_process_command(code.mount_path, gpus=bool(spec.resources.gpus))
        ),
        "shutdownAfterJobFinishes": True,
        "submitterPodTemplate": _ray_submitter(template, labels),
    }
    rp = spec.run_policy
    if rp.ttl_seconds_after_finished is not None:
        body["ttlSecondsAfterFinished"] = rp.ttl_seconds_after_finished
    if rp.active_deadline_seconds is not None:
        body["activeDeadlineSeconds"] = rp.active_deadline_seconds
    body["rayClusterSpec"] = cluster
    return _object(spec, labels, body)


def pin_ray_version(job: dict[str, Any], pins: Iterable[str]) -> None:
    """Tell KubeRay which Ray the pods run (``rayClusterSpec.rayVersion``): the version the
    program's requirements pin (``ray==2.60.0``, the kernel's Ray, which the image must match
    for the driver's tasks to run there). From Ray 2.53 KubeRay then probes each pod over HTTP
    (the dashboard agent's ``/api/healthz``); without it, its probes run ``wget`` inside the
    container, and an image without wget (a slim Python base) never gets Ready."""
    for pin in pins:
        name, sep, version = pin.partition("==")
        if sep and name.strip().lower() == "ray":
            job["spec"]["rayClusterSpec"]["rayVersion"] = version.strip()
            return


def _ray_submitter(template: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """KubeRay's submitter pod (``ray job submit``, which prints the driver's output) as
    KubeRay makes it by default (the head's image, its resources), with the job's labels and
    its container named as the Ray pods' (KubeRay takes the first): its log is the driver's,
    followed like every pod of the job. KubeRay fills in the command."""
    pod = template["spec"]
    container = {
        "name": pod["containers"][0]["name"],
        "image": pod["containers"][0]["image"],
        "resources": copy.deepcopy(RAY_SUBMITTER_RESOURCES),
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    keys = ("imagePullSecrets", "serviceAccountName", "automountServiceAccountToken")
    for key in (*keys, "nodeSelector", "tolerations"):
        if key in pod:
            spec[key] = copy.deepcopy(pod[key])
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


RAY_SUBMITTER_RESOURCES = {
    "limits": {"cpu": "1", "memory": "1Gi"},
    "requests": {"cpu": "500m", "memory": "200Mi"},
}


def _head_and_workers(spec: JobSpec, head: str, template: dict[str, Any]) -> dict[str, Any]:
    """``head`` (one replica, rank 0) and ``nodes - 1`` Workers, all from ``template``."""
    replicas = {head: _replica(spec, head, 1, template)}
    if spec.nodes > 1:
        replicas["Worker"] = _replica(spec, "Worker", spec.nodes - 1, template)
    return replicas


def _cpu_only(spec: JobSpec) -> dict[str, dict[str, str]]:
    r = spec.resources
    out: dict[str, dict[str, str]] = {}
    if r.cpu or r.memory:
        out["requests"] = {k: v for k, v in (("cpu", r.cpu), ("memory", r.memory)) if v}
    return out


@_registered
def mpijob(spec: JobSpec, code: CodeSource, labels: dict[str, str]) -> dict[str, Any]:
    """Launcher (runs mpirun, no GPUs) + Workers (``slotsPerWorker`` ranks each). The launcher's
    agent restarts mpirun after a fault (:mod:`jupyter_ktrain.pod.agent.relaunch`). The
    launcher also gets the hostfile and rsh agent under Open MPI 5's names (the controller
    sets Open MPI 4's only), unless ``--env`` sets them."""
    kind = KIND_TABLE[spec.kind]
    own = {k for k, _ in spec.env}
    ompi5 = tuple((k, v) for k, v in OPEN_MPI_5_ENV if k not in own)
    launcher = PodRole(
        container=kind.container,
        command=mpi_launcher_command(spec, code.mount_path),
        trains=False,
        resources=LAUNCHER_RESOURCES,
        # the launcher pod is Never; its agent re-runs mpirun after a fault, this many times
        extra_env=((MAX_RESTARTS_ENV, str(spec.run_policy.max_restarts)), *ompi5),
        api_access=True,  # mpirun starts the ranks with `kubectl exec`, as the operator's SA
    )
    worker = PodRole(container=kind.container, command=None)
    body: dict[str, Any] = {"slotsPerWorker": spec.nproc, "mainContainer": kind.container}
    body = with_run_policy(body, spec, spec.nodes + 1)
    body[str(kind.replica_key)] = {
        "Launcher": _replica(spec, "Launcher", 1, pod_template(spec, code, launcher, labels)),
        "Worker": _replica(spec, "Worker", spec.nodes, pod_template(spec, code, worker, labels)),
    }
    return _object(spec, labels, body)


_PATCHABLE = (
    "serviceAccountName",
    "nodeSelector",
    "tolerations",
    "volumes",
    "imagePullSecrets",
    "affinity",
    "schedulingGates",
    "securityContext",
    "terminationGracePeriodSeconds",
)


@_registered
def trainjob(spec: JobSpec, code: CodeSource, labels: dict[str, str]) -> dict[str, Any]:
    """A Trainer v2 TrainJob referencing ``spec.runtime``; pod settings as a runtime patch.

    Built from the same pod template as the other kinds: the container's command, env and
    resources become ``trainer``; the pod's labels and annotations (the Multus RDMA network),
    volumes, node selector, tolerations, affinity, pull secrets and service account, and the
    container's mounts and security context (IPC_LOCK for RDMA), become ``runtimePatches`` of
    the runtime's ``node`` job (Trainer v2.2+: the only way they reach the pods; v2.0's
    ``podSpecOverrides`` and ``labels`` are gone).
    """
    kind = KIND_TABLE[spec.kind]
    extra = ((PEERS_ENV, "1"),) if stops_itself(spec) else ()  # (fault_runtime: per node)
    role = PodRole(
        container=kind.container,
        command=replica_command(kind, code.mount_path, gpus=bool(spec.resources.gpus)),
        extra_env=extra,
    )
    template = pod_template(spec, code, role, labels)
    ps = template["spec"]
    container = ps.pop("containers")[0]
    # a runtime patch cannot say it: the job's own runtime does (fault_runtime)
    ps.pop("automountServiceAccountToken", None)
    leftover = sorted(set(ps) - set(_PATCHABLE))
    if "envFrom" in container:
        leftover.append("envFrom")
    if leftover:  # spec validation rejects these first; this guards the mapping itself
        raise SpecError(f"--kind {kind.name} cannot express pod fields {', '.join(leftover)}.")
    trainer: dict[str, Any] = {"image": container["image"], "command": container["command"]}
    if container.get("env"):
        trainer["env"] = container["env"]
    trainer["numNodes"] = spec.nodes
    trainer["numProcPerNode"] = spec.nproc
    if container.get("resources"):
        trainer["resourcesPerNode"] = container["resources"]
    pod: dict[str, Any] = {k: ps[k] for k in _PATCHABLE if k in ps}
    patched = {k: container[k] for k in ("volumeMounts", "securityContext") if k in container}
    if patched:
        pod["containers"] = [{"name": kind.container, **patched}]
    meta = {"labels": dict(labels)}
    job_patch = {
        "name": TRAINJOB_TARGET,
        "template": {"metadata": meta, "spec": {"template": {**template, "spec": pod}}},
    }
    patch = {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {"metadata": meta, "spec": {"replicatedJobs": [job_patch]}}
        },
    }
    body: dict[str, Any] = {
        "runtimeRef": {
            "name": spec.runtime,
            "apiGroup": kind.group,
            "kind": "ClusterTrainingRuntime",
        },
        "trainer": trainer,
        "runtimePatches": [patch],
    }
    return _object(spec, labels, body)
