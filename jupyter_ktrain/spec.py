"""The job description: pure, frozen dataclasses with validation and no I/O.

A :class:`JobSpec` is what every backend consumes. The magic, the ``ktrain`` CLI and YAML files
all build one through :func:`JobSpec.create`, which validates everything a user can get wrong
before any process or Kubernetes object exists.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from .errors import SpecError

__all__ = [
    "BACKENDS",
    "KINDS",
    "JobSpec",
    "Resources",
    "max_name_length",
    "replica_suffixes",
    "validate_name",
]

Kind = Literal["PyTorchJob", "TFJob", "MPIJob", "TrainJob"]
KINDS: tuple[str, ...] = ("PyTorchJob", "TFJob", "MPIJob", "TrainJob")
BACKENDS: tuple[str, ...] = ("local", "kubernetes")

_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")
_K8S_MAX_LABEL = 63


def replica_suffixes(kind: str, nodes: int) -> list[str]:
    """Suffixes the operator appends to the job name for its pods and services.

    The longest one bounds the job name: ``{name}-worker-{nodes-1}`` must still be a valid
    DNS-1035 label (63 characters).
    """
    last = max(nodes - 1, 0)
    common = [f"-worker-{last}"]
    extra = {
        "PyTorchJob": ["-master-0"],
        "TFJob": ["-chief-0", f"-ps-{last}"],
        "MPIJob": ["-launcher"],
        "TrainJob": [f"-node-0-{last}"],
    }
    return common + extra.get(kind, [])


def max_name_length(kind: str, nodes: int) -> int:
    return _K8S_MAX_LABEL - max(len(s) for s in replica_suffixes(kind, nodes))


def validate_name(name: str, kind: str = "PyTorchJob", nodes: int = 1) -> str:
    """Return ``name`` if it is a DNS-1035 label with room for replica suffixes, else raise."""
    limit = max_name_length(kind, nodes)
    if not _DNS1035.match(name):
        raise SpecError(
            f"Job name {name!r} is not a valid DNS-1035 label: use lower-case letters, digits and "
            f"'-', starting with a letter and ending with a letter or digit (e.g. 'bert-ft-1'). "
            f"Set it with --name."
        )
    if len(name) > limit:
        raise SpecError(
            f"Job name {name!r} is {len(name)} characters; with {nodes} node(s) a {kind} name "
            f"may have at most {limit} so that pod names like "
            f"'{name[:8]}...{replica_suffixes(kind, nodes)[0]}' stay within 63. "
            f"Pass a shorter --name."
        )
    return name


def default_name(hint: str = "ktrain") -> str:
    """A fresh job name from a hint (usually the function the cell calls)."""
    base = re.sub(r"[^a-z0-9-]+", "-", hint.lower()).strip("-") or "ktrain"
    if not base[0].isalpha():
        base = "job-" + base
    return f"{base[:30].rstrip('-')}-{secrets.token_hex(3)}"


def _check_quantity(flag: str, value: str | None) -> None:
    if value is not None and not _QUANTITY.match(value):
        raise SpecError(
            f"{flag} {value!r} is not a Kubernetes quantity: use e.g. '8', '500m', '64Gi'."
        )


@dataclass(frozen=True)
class Resources:
    """Per-node (per-pod) resources. ``gpus`` is GPUs per node."""

    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    gpu_resource: str = "nvidia.com/gpu"

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise SpecError(f"--gpus-per-node must be 0 or more, got {self.gpus}.")
        _check_quantity("--cpu", self.cpu)
        _check_quantity("--memory", self.memory)


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
    kind: str = "PyTorchJob"
    backend: str = "local"
    resources: Resources = field(default_factory=Resources)
    env: tuple[tuple[str, str], ...] = ()
    image: str | None = None
    namespace: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

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

    @classmethod
    def create(cls, **kwargs: Any) -> JobSpec:
        """Build a spec from loose values (flags, YAML); unknown keys are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise SpecError(
                f"Unknown job option(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}."
            )
        if isinstance(kwargs.get("resources"), dict):
            kwargs["resources"] = Resources(**kwargs["resources"])
        for key in ("env", "labels"):
            if isinstance(kwargs.get(key), dict):
                kwargs[key] = tuple(kwargs[key].items())
        return cls(**kwargs)

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
