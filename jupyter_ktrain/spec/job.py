"""The job description: pure, frozen dataclasses with validation and no I/O.

A :class:`JobSpec` is what every backend consumes. The magic, the ``ktrain`` CLI and YAML files
all build one through :func:`JobSpec.create`, which converts their values once
(:mod:`jupyter_ktrain.spec.values`) and validates everything a user can get wrong before any
process or Kubernetes object exists.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..config import check_uri
from ..errors import SpecError
from ..kinds import DEFAULT_KIND, KIND_TABLE, KINDS, JobKind
from .checks import check_dns_label, check_label
from .parts import DeepSpeed, Mount, Rdma, Resources, SecretEnv, Storage
from .scheduling import Elastic, InitContainer, RunPolicy, Scheduling, Toleration
from .values import convert

__all__ = [
    "BACKENDS",
    "KINDS",
    "DeepSpeed",
    "Elastic",
    "InitContainer",
    "JobSpec",
    "Mount",
    "Rdma",
    "Resources",
    "RunPolicy",
    "Scheduling",
    "SecretEnv",
    "Storage",
    "Toleration",
    "check_job_name",
    "max_name_length",
    "replica_suffixes",
    "validate_name",
]

BACKENDS: tuple[str, ...] = ("local", "kubernetes")

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_K8S_MAX_LABEL = 63


def replica_suffixes(kind: str, nodes: int) -> list[str]:
    """Suffixes the operator appends to the job name for its pods and services.

    The longest one bounds the job name: ``{name}-worker-{nodes-1}`` must still be a valid
    DNS-1035 label (63 characters).
    """
    known = KIND_TABLE.get(kind)
    return known.pod_suffixes(nodes) if known else [f"-worker-{max(nodes - 1, 0)}"]


def max_name_length(kind: str, nodes: int) -> int:
    return _K8S_MAX_LABEL - max(len(s) for s in replica_suffixes(kind, nodes))


def check_job_name(name: object, what: str = "job", listed: str = "`%ktrain list`") -> str:
    """Return ``name`` if it can name a job (or a sweep: ``what``, and where they are
    ``listed``), else raise :class:`SpecError`.

    The one check every front end applies to a name it is given (the magic, the ``ktrain``
    command, the side panel's REST API, the Python API through the backends): a DNS-1035 label
    (what Kubernetes accepts), so it never holds a path separator or ``..`` and the local
    backend can never reach outside its job store through it."""
    if not isinstance(name, str) or not _DNS1035.match(name) or len(name) > _K8S_MAX_LABEL:
        raise SpecError(
            f"{name!r} is not a valid {what} name (a DNS-1035 label): use at most "
            f"{_K8S_MAX_LABEL} lower-case letters, digits and '-', starting with a letter and "
            f"ending with a letter or digit (e.g. 'bert-ft-1'). {listed} shows the {what}s "
            f"that exist."
        )
    return name


def validate_name(name: str, kind: str = DEFAULT_KIND, nodes: int = 1) -> str:
    """Return ``name`` if it is a DNS-1035 label with room for replica suffixes, else raise."""
    check_job_name(name)
    limit = max_name_length(kind, nodes)
    if len(name) > limit:
        raise SpecError(
            f"Job name {name!r} is {len(name)} characters; with {nodes} node(s) a {kind} name "
            f"may have at most {limit} so that pod names like "
            f"'{name[:8]}...{max(replica_suffixes(kind, nodes), key=len)}' stay within 63. "
            f"Pass a shorter --name."
        )
    return name


def default_name(hint: str = "ktrain") -> str:
    """A fresh job name from a hint (usually the function the cell calls)."""
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-") or "ktrain"
    if not base[0].isalpha():
        base = "job-" + base
    return f"{base[:30].rstrip('-')}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class JobSpec:
    """Everything a backend needs to run the captured program as a distributed job.

    ``nodes`` is the number of replicas (pods, or local torchrun agents); ``procs_per_node`` the
    processes each starts (torchrun ``--nproc-per-node``); ``None`` means one per GPU, or one
    when there are no GPUs.
    """

    name: str
    nodes: int = 1
    procs_per_node: int | None = None
    kind: str = DEFAULT_KIND
    backend: str = "local"
    resources: Resources = field(default_factory=Resources)
    env: tuple[tuple[str, str], ...] = ()
    image: str | None = None
    namespace: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    rdma: Rdma | None = None
    deepspeed: DeepSpeed | None = None
    storage: Storage = field(default_factory=Storage)
    scheduling: Scheduling = field(default_factory=Scheduling)
    run_policy: RunPolicy = field(default_factory=RunPolicy)
    elastic: Elastic | None = None
    secret_env: tuple[SecretEnv, ...] = ()
    env_from_secrets: tuple[str, ...] = ()
    pass_env: tuple[str, ...] = ()  # --env NAME: the kernel's value, never written down
    allow_secrets: tuple[str, ...] = ()  # --allow-secret NAME: ship that secret anyway
    ps_replicas: int = 0
    runtime: str = "torch-distributed"
    metrics_port: int | None = None  # the agent's Prometheus endpoint; None: off
    warm: bool = False  # keep the nodes' agents after a run; the next same-shape cell reuses them
    # seconds a rank may make no progress before it is named hung (None: the larger of 2 min
    # and 10x its median step time; jupyter_ktrain.hangs)
    hang_after: float | None = None
    # the MLflow tracking URI of this job's run ("off": none; None: config mlflow) and experiment
    mlflow: str | None = None
    experiment: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(
                f"--kind {self.kind!r} is not supported; use one of {', '.join(KINDS)}."
            )
        if self.backend not in BACKENDS:
            raise SpecError(
                f"--backend {self.backend!r} is not known; use one of {', '.join(BACKENDS)}."
            )
        if self.nodes < 1:
            raise SpecError(f"--nodes must be at least 1, got {self.nodes}.")
        if self.procs_per_node is not None and self.procs_per_node < 1:
            raise SpecError(f"--procs-per-node must be at least 1, got {self.procs_per_node}.")
        for key, _ in self.env:
            if not _ENV_NAME.match(key):
                raise SpecError(
                    f"--env {key!r} is not a valid environment variable name: use letters, "
                    f"digits and '_' (e.g. --env LR=0.1)."
                )
        validate_name(self.name, self.kind, self.nodes)
        if self.metrics_port is not None and not 1024 <= self.metrics_port <= 65535:
            raise SpecError(
                f"--metrics-port must be a TCP port from 1024 to 65535, got {self.metrics_port} "
                "(e.g. --metrics-port 9400)."
            )
        for key, value in self.labels:
            check_label("--label", key, value)
        if self.mlflow is not None:
            check_uri(self.mlflow)
        if self.namespace is not None:
            check_dns_label("--namespace", self.namespace, "namespace name")
        _check_cross_fields(self)

    @classmethod
    def create(cls, **values: Any) -> JobSpec:
        """Build a spec from loose values (flags, YAML, Python): the one conversion, in
        :func:`jupyter_ktrain.spec.values.convert`; unknown keys are an error."""
        return cls(**convert(values, [f.name for f in fields(cls)]))

    @property
    def nproc(self) -> int:
        """Processes per node, resolved: explicit, else one per GPU, else one."""
        if self.procs_per_node is not None:
            return self.procs_per_node
        return self.resources.gpus or 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def evolve(self, **changes: Any) -> JobSpec:
        return replace(self, **changes)

    def describe_world(self) -> str:
        return f"{self.nodes} node(s) x {self.nproc} process(es)"


def _check_cross_fields(spec: JobSpec) -> None:
    """Checks that involve more than one part of the spec: one SpecError each."""
    kind, info = spec.kind, KIND_TABLE[spec.kind]
    if spec.image is not None:
        from ..packaging.reference import Reference

        Reference.parse(spec.image, what="--image")
    if spec.elastic is not None:
        e = spec.elastic
        if not info.elastic:
            able = _kinds_that(lambda k: k.elastic)
            raise SpecError(
                f"--elastic needs --kind {able} (torchrun's c10d rendezvous); {kind} has no "
                f"elastic policy. Drop --elastic or use --kind {able}."
            )
        if not e.min_nodes <= spec.nodes <= e.max_nodes:
            raise SpecError(
                f"--nodes {spec.nodes} is outside --elastic {e.min_nodes}:{e.max_nodes}: start "
                f"with a node count between the minimum and the maximum."
            )
    if spec.scheduling.kueue_queue and info.kueue_ignores:
        raise SpecError(
            f"--kueue-queue: Kueue does not manage {kind} ({info.kueue_ignores}), so the job "
            f"would run at once, outside the queue's quota. Use --kind "
            f"{_kinds_that(lambda k: not k.kueue_ignores)}, or drop --kueue-queue."
        )
    placement = spec.scheduling.placement
    if placement and info.kueue_ignores:
        raise SpecError(
            f"{placement[0]}: Kueue does not place {kind} ({info.kueue_ignores}). Use --kind "
            f"{_kinds_that(lambda k: not k.kueue_ignores)}, or drop {placement[0]}."
        )
    if spec.deepspeed is not None:
        if info.launcher != "torchrun":
            raise SpecError(
                f"--deepspeed runs under torchrun in every replica, which needs --kind "
                f"{_kinds_that(lambda k: k.launcher == 'torchrun')}, not {kind}."
            )
        spec.deepspeed.check_batch(spec.world_size, spec.describe_world())
    if spec.ps_replicas < 0 or (spec.ps_replicas and info.replica("PS") is None):
        able = _kinds_that(lambda k: k.replica("PS") is not None)
        raise SpecError(
            f"--ps {spec.ps_replicas}: parameter servers exist only in a {able} and the count "
            f"must be 0 or more; use --kind {able} or drop --ps."
        )
    _check_env_secrets(spec)
    names = {k for k, _ in spec.env} | set(spec.pass_env)
    for s in spec.secret_env:
        if s.name in names:
            raise SpecError(f"{s.name} is set both by --env and by --secret-env: keep one of them.")
    if spec.pass_env and spec.backend != "local":
        name = spec.pass_env[0]
        raise SpecError(
            f"--env {name} (no value) passes the kernel's value on the local backend only; a "
            f"cluster gets it from a Secret: --secret-env {name}=SECRET/KEY."
        )
    if len({s.name for s in spec.secret_env}) != len(spec.secret_env):
        raise SpecError("--secret-env sets the same variable twice: keep one of them.")
    for secret in spec.env_from_secrets:
        check_dns_label("--env-from-secret", secret, "Secret name")
    if info.trainer_runtime:
        _check_trainer_runtime(spec)
    if spec.metrics_port is not None and not any(r.metrics for r in info.replicas):
        able = _kinds_that(lambda k: any(r.metrics for r in k.replicas))
        raise SpecError(
            f"--metrics-port is served by the agent each pod runs, and a {kind}'s pods run "
            f"none; drop --metrics-port or use --kind {able}."
        )
    fixed = [r for r in info.replicas if not r.exit_code_restarts]
    if fixed and spec.run_policy.restart_policy == "ExitCode":
        raise SpecError(
            f"--restart-policy ExitCode is not supported for {kind} {fixed[0].name.lower()}s: "
            "use OnFailure or Never."
        )


def _kinds_that(has: Callable[[JobKind], bool]) -> str:
    """The kinds with a feature, for a message: ``PyTorchJob or TrainJob``."""
    return " or ".join(k.name for k in KIND_TABLE.values() if has(k))


def _check_trainer_runtime(spec: JobSpec) -> None:
    """A Trainer v2 job (TrainJob) takes pod-level settings from its runtime, not the job."""
    r, s = spec.rdma, spec.scheduling
    unsupported = [
        ("--host-network", r is not None and r.host_network),
        ("--priority-class", s.priority_class is not None),
        ("--gang", s.gang is not None),
        (
            "--env-from-secret (Trainer v2.2+ cannot patch envFrom into the runtime's node "
            "container; pass each variable with --secret-env NAME=SECRET/KEY)",
            bool(spec.env_from_secrets),
        ),
        (
            "--init-container (only the runtime's own init containers can be overridden)",
            bool(s.init_containers),
        ),
        (
            "--restart-policy/--ttl/--active-deadline/--clean-pod-policy (--max-restarts "
            "applies: it is the JobSet's restart limit)",
            not replace(spec.run_policy, backoff_limit=None).is_default,
        ),
    ]
    bad = [flag for flag, used in unsupported if used]
    if bad:
        raise SpecError(
            f"--kind {spec.kind} cannot set {', '.join(bad)}: a {spec.kind} takes these from its "
            f"ClusterTrainingRuntime (--runtime {spec.runtime}). Put them in the runtime, or use "
            f"--kind {DEFAULT_KIND}."
        )
    if not _DNS1035.match(spec.runtime):
        raise SpecError(f"--runtime {spec.runtime!r} is not a valid runtime name.")


def _check_env_secrets(spec: JobSpec) -> None:
    """An --env value that is a secret would be written into the pod spec, the job's plan
    and the dry run: refuse it and say how to pass it by reference instead."""
    from ..capture.secrets import find_in_value

    for key, value in spec.env:
        found = find_in_value(key, value)
        if found is None or key in spec.allow_secrets:
            continue
        secret = key.lower().replace("_", "-")
        raise SpecError(
            f"--env {key}=... is a secret ({found.kind}); it would be written into the job's "
            f"plan and pod spec, readable by anyone who can read them. Pass it by reference: "
            f"--secret-env {key}={secret}/{key.lower().rsplit('_', 1)[-1]} on Kubernetes, "
            f"--env {key} (no value: the kernel's value, through the environment) on the "
            f"local backend. To write it anyway: --allow-secret {key}."
        )
    for name in spec.pass_env:
        if not _ENV_NAME.match(name):
            raise SpecError(
                f"--env {name!r} is not a valid environment variable name: use letters, "
                f"digits and '_' (e.g. --env HF_TOKEN)."
            )
