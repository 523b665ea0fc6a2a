"""What makes two ``--warm`` cells the same job: the shape, and how a difference is said.

A warm job's nodes are fixed when it starts: kind, nodes, processes per node, GPUs, image,
volumes and environment. A later ``--warm`` cell with the same shape runs on them; one whose
shape differs starts a new job, and the cell says which settings differ. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from ..kinds import DEFAULT_KIND

if TYPE_CHECKING:
    from ..spec.job import JobSpec

__all__ = ["DEFAULT_IDLE_S", "WARM_KINDS", "check_warm", "shape_changes", "warm_shape"]

WARM_KINDS = (DEFAULT_KIND,)  # the kinds a warm job can be, so far
WARM_BACKENDS = ("local", "kubernetes")
DEFAULT_IDLE_S = 15 * 60.0  # how long a warm job waits for its next run, unless told


def warm_shape(spec: JobSpec) -> dict[str, Any]:
    """The settings a warm job's nodes are made with, as plain JSON data."""
    return {
        "kind": spec.kind,
        "nodes": spec.nodes,
        "procs": spec.nproc,
        "gpus": spec.resources.gpus,
        "image": spec.image or "",
        "namespace": spec.namespace or "",
        "volumes": [*sorted(repr(m) for m in spec.storage.mounts), f"shm={spec.storage.shm}"],
        "env": sorted(f"{k}={v}" for k, v in spec.env),
        "env_from_kernel": sorted(spec.pass_env),
        "secret_env": sorted(repr(s) for s in spec.secret_env) + sorted(spec.env_from_secrets),
    }


_WORDS = {
    "kind": "--kind",
    "nodes": "--nodes",
    "procs": "--procs-per-node",
    "gpus": "--gpus-per-node",
    "image": "--image",
    "namespace": "--namespace",
    "volumes": "volumes (--dataset/--checkpoints/--volume/--shm)",
    "env": "--env",
    "env_from_kernel": "--env NAME (from the kernel)",
    "secret_env": "--secret-env/--env-from-secret",
}


def shape_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``["--nodes 2 -> 3"]``: what differs between a warm job's shape and a cell's."""
    out = []
    for key, flag in _WORDS.items():
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, list) or isinstance(b, list):
            out.append(f"{flag} changed")
        else:
            out.append(f"{flag} {a or 'none'} -> {b or 'none'}")
    return out


def check_warm(spec: JobSpec) -> None:
    """One clear error, before anything is made, for a ``--warm`` this build cannot run."""
    if not spec.warm:
        return
    if spec.backend not in WARM_BACKENDS:
        raise SpecError(
            f"--warm is not supported on the {spec.backend} backend yet (only on "
            f"{', '.join(WARM_BACKENDS)}): drop --warm to run it as a new job."
        )
    if spec.kind not in WARM_KINDS:
        raise SpecError(
            f"--warm is not supported for kind {spec.kind} yet (only {', '.join(WARM_KINDS)}): "
            "drop --warm, or run it as a PyTorchJob."
        )
    if spec.elastic is not None:
        raise SpecError("--warm and --elastic do not go together: a warm job's nodes are fixed.")
    if spec.deepspeed is not None:
        raise SpecError(
            "--warm is not supported with --deepspeed yet: drop --warm (DeepSpeed runs as a "
            "new job each time)."
        )
