"""The typed parts of a :class:`~jupyter_ktrain.spec.job.JobSpec` that say where its pods are
scheduled and how the job restarts and grows: tolerations, init containers, scheduling, the
run policy and elasticity (what a pod is made of: :mod:`.spec_parts`). Pure frozen
dataclasses; each validates itself and raises one :class:`SpecError` naming the flag and the
fix (:mod:`.spec_checks`). ``parse`` class methods read the short text forms that flags and
YAML share (``key:Effect``, ``2:8``).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError
from ..kinds import job_kind
from .checks import check_dns_label, check_label, check_nonneg, check_topology_level

__all__ = [
    "CLEAN_POD_POLICIES",
    "DEFAULT_MAX_RESTARTS",
    "RESTART_POLICIES",
    "TAINT_EFFECTS",
    "Elastic",
    "InitContainer",
    "RunPolicy",
    "Scheduling",
    "Toleration",
]

RESTART_POLICIES = ("OnFailure", "Never", "Always", "ExitCode")
# A fault (exit >= 128, a deleted pod) is restarted this many times by default; a bug never.
DEFAULT_MAX_RESTARTS = 3
CLEAN_POD_POLICIES = ("All", "Running", "None")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# --------------------------------------------------------------------------- scheduling


@dataclass(frozen=True)
class Toleration:
    """``--toleration KEY[=VALUE][:EFFECT]``: Exists without a value, Equal with one."""

    key: str
    value: str | None = None
    effect: str | None = None

    def __post_init__(self) -> None:
        if self.effect is not None and self.effect not in TAINT_EFFECTS:
            raise SpecError(
                f"--toleration {self.key}:{self.effect}: effect must be one of "
                f"{', '.join(TAINT_EFFECTS)} (or left out for all effects)."
            )
        check_label("--toleration", self.key, self.value or "")

    @classmethod
    def parse(cls, text: str) -> Toleration:
        head, _, effect = text.partition(":")
        key, _, value = head.partition("=")
        if not key:
            raise SpecError(
                f"--toleration {text!r} is not KEY[=VALUE][:EFFECT]: e.g. --toleration "
                f"nvidia.com/gpu:NoSchedule."
            )
        return cls(key=key, value=value or None, effect=effect or None)

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "operator": "Equal" if self.value is not None else "Exists"}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


@dataclass(frozen=True)
class InitContainer:
    """``--init-container 'NAME=IMAGE COMMAND...'``: runs before training, same mounts."""

    name: str
    image: str
    command: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_dns_label("--init-container", self.name, "container name")
        if not self.image or any(c.isspace() for c in self.image):
            raise SpecError(f"--init-container {self.name}: image {self.image!r} is not valid.")

    @classmethod
    def parse(cls, text: str) -> InitContainer:
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise SpecError(f"--init-container {text!r}: {exc}; check the quoting.") from None
        name, sep, image = (words[0] if words else "").partition("=")
        if not (sep and name and image):
            raise SpecError(
                f"--init-container {text!r} is not 'NAME=IMAGE COMMAND...': e.g. "
                f"--init-container 'fetch=amazon/aws-cli aws s3 sync s3://bucket/ds /data'."
            )
        return cls(name=name, image=image, command=tuple(words[1:]))


@dataclass(frozen=True)
class Scheduling:
    """Where and how pods are scheduled. ``gang`` is ``None`` or ``"volcano"``; ``queue`` is
    the Volcano queue; ``kueue_queue`` the Kueue LocalQueue (a job label). ``topology`` and
    ``topology_preferred``: the topology level (a node label key, or its last part, e.g.
    ``rack``) whose one domain must (may) hold every pod of the collective, through Kueue's
    Topology-Aware Scheduling; at most one of them."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class: str | None = None
    gang: str | None = None
    queue: str | None = None
    kueue_queue: str | None = None
    topology: str | None = None
    topology_preferred: str | None = None
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    init_containers: tuple[InitContainer, ...] = ()

    def __post_init__(self) -> None:
        for key, value in self.node_selector:
            check_label("--node-selector", key, value)
        if self.gang not in (None, "volcano"):
            raise SpecError(f"--gang {self.gang!r} is not supported: use --gang volcano.")
        if self.queue is not None and self.gang is None:
            raise SpecError(
                "--queue names a Volcano queue and needs --gang volcano; for Kueue use "
                "--kueue-queue instead."
            )
        if self.gang is not None and self.kueue_queue is not None:
            raise SpecError(
                "--gang volcano and --kueue-queue both admit the job as a gang: pick one "
                "(drop --kueue-queue, or drop --gang/--queue)."
            )
        if self.topology and self.topology_preferred:
            raise SpecError(
                "--topology and --topology-preferred both name a level: keep one (--topology "
                "requires one domain, --topology-preferred only prefers it)."
            )
        for flag, level in (("--topology", self.topology), ("--topology-preferred",
                                                           self.topology_preferred)):  # fmt: skip
            if level is not None:
                check_topology_level(flag, level)
        named: tuple[tuple[str, str | None, str], ...] = (
            ("--queue", self.queue, "queue name"),
            ("--kueue-queue", self.kueue_queue, "LocalQueue name"),
            ("--priority-class", self.priority_class, "PriorityClass name"),
            ("--service-account", self.service_account, "ServiceAccount name"),
        )
        for flag, val, what in named:
            if val is not None:
                check_dns_label(flag, val, what)
        for secret in self.image_pull_secrets:
            check_dns_label("--image-pull-secret", secret, "Secret name")
        if self.affinity is not None:
            unknown = set(self.affinity) - {"nodeAffinity", "podAffinity", "podAntiAffinity"}
            if unknown:
                raise SpecError(
                    f"--affinity has unknown key(s) {', '.join(sorted(unknown))}: use "
                    f"nodeAffinity, podAffinity or podAntiAffinity (Kubernetes Affinity)."
                )
        names = [c.name for c in self.init_containers]
        if len(set(names)) != len(names):
            raise SpecError("--init-container names must be unique; rename one.")

    @property
    def placement(self) -> tuple[str, str] | None:
        """(flag, level) of the topology asked for, or None."""
        if self.topology:
            return "--topology", self.topology
        if self.topology_preferred:
            return "--topology-preferred", self.topology_preferred
        return None


@dataclass(frozen=True)
class RunPolicy:
    """The operator's runPolicy plus the replicas' restartPolicy.

    Defaults fail a bug once and restart a fault: ``ExitCode`` (the operator retries only exit
    codes >= 128: a killed, evicted, preempted or OOM-killed process; a deleted pod is recreated
    anyway) with ``backoffLimit`` :data:`DEFAULT_MAX_RESTARTS`; an MPIJob's launcher, which the
    operator cannot restart by exit code, ``Never`` (its agent retries ``mpirun`` on a fault;
    a deleted worker is made anew by the operator under ExitCode).
    """

    restart_policy: str | None = None  # None: the kind's default (restart_policy_for)
    clean_pod_policy: str | None = None
    ttl_seconds_after_finished: int | None = None
    backoff_limit: int | None = None  # None: DEFAULT_MAX_RESTARTS
    active_deadline_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.restart_policy not in (None, *RESTART_POLICIES):
            raise SpecError(
                f"--restart-policy {self.restart_policy!r} is not known: use one of "
                f"{', '.join(RESTART_POLICIES)} (ExitCode retries only exit codes >= 128)."
            )
        if self.clean_pod_policy not in (None, *CLEAN_POD_POLICIES):
            raise SpecError(
                f"--clean-pod-policy {self.clean_pod_policy!r} is not known: use one of "
                f"{', '.join(CLEAN_POD_POLICIES)}."
            )
        check_nonneg("--ttl", self.ttl_seconds_after_finished)
        check_nonneg("--backoff-limit", self.backoff_limit)
        if self.active_deadline_seconds is not None and self.active_deadline_seconds < 1:
            raise SpecError(
                f"--active-deadline must be at least 1 second, got {self.active_deadline_seconds}."
            )

    @property
    def is_default(self) -> bool:
        return self == RunPolicy()

    def restart_policy_for(self, kind: str, replica: str) -> str:
        """``--restart-policy``, else the kind's default for the replica type (its
        :class:`~jupyter_ktrain.kinds.ReplicaType`; ExitCode for a kind ktrain does not know)."""
        if self.restart_policy:
            return self.restart_policy
        known = job_kind(kind)
        return known.restart_policy(replica) if known else "ExitCode"

    @property
    def max_restarts(self) -> int:
        """How many times a fault is restarted before the job fails (backoffLimit)."""
        return DEFAULT_MAX_RESTARTS if self.backoff_limit is None else self.backoff_limit


@dataclass(frozen=True)
class Elastic:
    """``--elastic MIN:MAX``: torchrun c10d rendezvous between MIN and MAX nodes."""

    min_nodes: int
    max_nodes: int
    max_restarts: int | None = None

    def __post_init__(self) -> None:
        if self.min_nodes < 1:
            raise SpecError(f"--elastic minimum must be at least 1, got {self.min_nodes}.")
        if self.min_nodes > self.max_nodes:
            raise SpecError(
                f"--elastic {self.min_nodes}:{self.max_nodes}: the minimum is larger than the "
                f"maximum; write MIN:MAX, e.g. --elastic {self.max_nodes}:{self.min_nodes}."
            )
        check_nonneg("--max-restarts", self.max_restarts)

    @classmethod
    def parse(cls, text: str) -> Elastic:
        lo, sep, hi = text.partition(":")
        try:
            low, high = int(lo), int(hi if sep else lo)
        except ValueError:
            raise SpecError(
                f"--elastic {text!r} is not MIN:MAX: e.g. --elastic 2:8 lets the job run on "
                f"2 to 8 nodes."
            ) from None
        return cls(min_nodes=low, max_nodes=high)
