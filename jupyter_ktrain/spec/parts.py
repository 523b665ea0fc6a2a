"""The typed parts of a :class:`~jupyter_ktrain.spec.job.JobSpec` that a pod is made of: its
resources, network, DeepSpeed and storage (where it is scheduled, how it restarts and grows:
:mod:`.spec_scheduling`). Pure frozen dataclasses; each validates itself and raises one
:class:`SpecError` naming the flag and the fix (:mod:`.spec_checks`). ``parse`` class methods
read the short text forms that flags and YAML share (``PVC:/path:ro``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from .checks import check_dns_label, check_env_name, check_quantity

__all__ = [
    "DeepSpeed",
    "Mount",
    "Rdma",
    "Resources",
    "SecretEnv",
    "Storage",
]

PRECISIONS = ("bf16", "fp16")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
RESERVED_PATHS = ("/dev/shm", "/ktrain")

_RESOURCE_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resources:
    """Per-node (per-pod) resources. ``gpus`` is GPUs per node.

    ``cpu``/``memory`` are requests; ``cpu_limit``/``memory_limit`` optional limits (GPUs and
    RDMA devices always get equal requests and limits).
    """

    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    gpu_resource: str = "nvidia.com/gpu"
    cpu_limit: str | None = None
    memory_limit: str | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise SpecError(f"--gpus-per-node must be 0 or more, got {self.gpus}.")
        check_quantity("--cpu", self.cpu)
        check_quantity("--memory", self.memory)
        check_quantity("--cpu-limit", self.cpu_limit)
        check_quantity("--memory-limit", self.memory_limit)


# --------------------------------------------------------------------------- network


@dataclass(frozen=True)
class Rdma:
    """A network profile (``--rdma infiniband|roce|tcp|FILE``) as data.

    ``nccl_env`` goes into every training container; ``networks`` becomes the Multus
    ``k8s.v1.cni.cncf.io/networks`` pod annotation; ``resource`` (e.g.
    ``rdma/rdma_shared_device_a``) is requested ``resource_count`` times per pod in requests
    and limits; ``ipc_lock`` adds the IPC_LOCK capability RDMA needs to pin memory;
    ``host_network`` runs pods in the node's network namespace (with ClusterFirstWithHostNet).
    """

    name: str = "tcp"
    nccl_env: tuple[tuple[str, str], ...] = ()
    networks: str | None = None
    resource: str | None = None
    resource_count: int = 1
    ipc_lock: bool = False
    host_network: bool = False

    def __post_init__(self) -> None:
        for key, _ in self.nccl_env:
            check_env_name(f"--rdma {self.name}: env", key, "NCCL_IB_HCA=mlx5")
        if self.resource is not None and not _RESOURCE_NAME.match(self.resource):
            raise SpecError(
                f"--rdma {self.name}: resource {self.resource!r} is not an extended resource "
                f"name: use DOMAIN/NAME, e.g. 'rdma/rdma_shared_device_a'."
            )
        if self.resource_count < 1:
            raise SpecError(
                f"--rdma {self.name}: resource_count must be at least 1, got {self.resource_count}."
            )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], name: str = "custom") -> Rdma:
        """A profile from YAML: ``env`` may be a mapping; unknown keys are an error."""
        known = {"name", "nccl_env", "env", "networks", "resource", "resource_count"}
        known |= {"ipc_lock", "host_network"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(
                f"--rdma {name}: unknown profile key(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(known))}."
            )
        values = dict(data)
        env = values.pop("env", None) or values.pop("nccl_env", None) or {}
        if isinstance(env, Mapping):
            env = tuple((str(k), str(v)) for k, v in env.items())
        else:
            env = tuple((str(k), str(v)) for k, v in env)
        values.setdefault("name", name)
        return cls(nccl_env=env, **values)


# --------------------------------------------------------------------------- DeepSpeed


@dataclass(frozen=True)
class DeepSpeed:
    """DeepSpeed settings (``--deepspeed zero1|zero2|zero3|PATH``).

    Either ``stage`` (a config generated from the other fields) or ``config`` (a file's
    contents, ``source`` its name for messages) with the flags given explicitly layered on top.
    ``None`` batch fields mean "from the file" or, when generating, micro 1 / accumulation 1 /
    train batch = micro x accumulation x world size.
    """

    stage: int | None = None
    config: Mapping[str, Any] | None = None
    source: str | None = None
    precision: str | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    train_batch_size: int | None = None
    offload_optimizer: str = "none"
    offload_param: str = "none"
    gradient_clipping: float | None = 1.0
    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    communication_data_type: str | None = None

    def __post_init__(self) -> None:
        if self.stage is None and self.config is None:
            raise SpecError(
                "--deepspeed needs a ZeRO stage or a config file: use --deepspeed zero1|zero2|"
                "zero3 or --deepspeed path/to/ds_config.json."
            )
        if self.stage is not None and self.stage not in (0, 1, 2, 3):
            raise SpecError(f"--deepspeed stage {self.stage} is not a ZeRO stage: use 0 to 3.")
        if self.precision is not None and self.precision not in PRECISIONS:
            raise SpecError(f"precision {self.precision!r} is not known: use --bf16 or --fp16.")
        for flag, dev in (
            ("--offload-optimizer", self.offload_optimizer),
            ("--offload-param", self.offload_param),
        ):
            if dev not in OFFLOAD_DEVICES:
                raise SpecError(f"{flag} {dev!r} is not known: use one of none, cpu, nvme.")
        if self.offload_param != "none" and self.stage not in (None, 3):
            raise SpecError(
                f"--offload-param {self.offload_param} needs ZeRO stage 3 (parameters are only "
                f"partitioned there): use --deepspeed zero3 or drop --offload-param."
            )
        for flag, num in (
            ("--micro-batch", self.micro_batch),
            ("--grad-accum", self.grad_accum),
            ("--train-batch-size", self.train_batch_size),
        ):
            if num is not None and num < 1:
                raise SpecError(f"{flag} must be at least 1, got {num}.")
        if self.gradient_clipping is not None and self.gradient_clipping < 0:
            raise SpecError(f"--grad-clip must be 0 or more, got {self.gradient_clipping}.")

    def _from_file(self, key: str) -> int | None:
        value = (self.config or {}).get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def batch_numbers(self) -> tuple[int | None, int | None, int | None]:
        """(micro, accumulation, train batch): the flags, else the file, else None."""
        return (
            self.micro_batch or self._from_file("train_micro_batch_size_per_gpu"),
            self.grad_accum or self._from_file("gradient_accumulation_steps"),
            self.train_batch_size or self._from_file("train_batch_size"),
        )

    def check_batch(self, world_size: int, describe_world: str) -> None:
        """Raise unless train_batch_size = micro x accumulation x world size (DeepSpeed's rule).

        Missing numbers are derived the way DeepSpeed derives them, so only a total that no
        integer micro batch / accumulation can reach is an error. The message offers the three
        consistent fixes: change the total, change micro batch and accumulation to reach the
        total at this world size, or change the world size.
        """
        keys = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
        if any((self.config or {}).get(k) == "auto" for k in keys):
            return
        micro, accum, total = self.batch_numbers()
        if total is None:
            return
        if total % ((micro or 1) * (accum or 1) * world_size) == 0 and (
            micro is None or accum is None
        ):
            return
        m, a = micro or 1, accum or 1
        if m * a * world_size == total:
            return
        where = f"--deepspeed {self.source}" if self.source else "--train-batch-size"
        fixes = [
            f"--train-batch-size {m * a * world_size} (keeps micro batch {m} x accumulation "
            f"{a} at world size {world_size})"
        ]
        per_rank, rem = divmod(total, world_size)
        if rem == 0:
            mm = max(d for d in range(1, min(m, per_rank) + 1) if per_rank % d == 0)
            fixes.append(
                f"--micro-batch {mm} --grad-accum {per_rank // mm} (reaches {total} at world "
                f"size {world_size})"
            )
        else:
            fixes.append(
                f"no micro batch x accumulation reaches {total} at world size {world_size} "
                f"({total} is not a multiple of {world_size}); change the total instead"
            )
        want, rem = divmod(total, m * a)
        if rem == 0:
            fixes.append(
                f"a world size of {want} = {total} / ({m} x {a}) (e.g. --nodes {_nodes_hint(want)})"
            )
        else:
            fixes.append(f"no world size reaches {total} with micro batch {m} x accumulation {a}")
        raise SpecError(
            f"DeepSpeed batch sizes are inconsistent ({where}): train_batch_size {total} != "
            f"micro batch {m} x gradient accumulation {a} x world size {world_size} "
            f"({describe_world}) = {m * a * world_size}, so DeepSpeed would abort at start. "
            "Fix one of: " + "; ".join(f"({i}) {f}" for i, f in enumerate(fixes, 1)) + "."
        )


def _nodes_hint(world: int) -> str:
    return f"{world} --procs-per-node 1, or --nodes 1 --procs-per-node {world}"


# --------------------------------------------------------------------------- storage


@dataclass(frozen=True)
class Mount:
    """A PersistentVolumeClaim mounted into every training container."""

    claim: str
    path: str
    read_only: bool = False
    sub_path: str | None = None
    name: str | None = None
    flag: str = field(default="--volume", compare=False, repr=False)  # for messages only

    def __post_init__(self) -> None:
        check_dns_label(self.flag, self.claim, "PersistentVolumeClaim name")
        if not self.path.startswith("/"):
            raise SpecError(
                f"{self.flag} mount path {self.path!r} must be absolute: use CLAIM:/path, "
                f"e.g. {self.flag} my-data:/data:ro."
            )
        norm = self.path.rstrip("/") or "/"
        if norm in RESERVED_PATHS or norm == "/":
            raise SpecError(
                f"{self.flag} cannot mount at {self.path}: that path is used by the job itself "
                f"(/dev/shm is --shm, /ktrain holds the code). Pick another mount path."
            )
        if self.name is not None:
            check_dns_label(self.flag, self.name, "volume name")

    @property
    def volume_name(self) -> str:
        return self.name or self.claim

    @classmethod
    def parse(cls, text: str, flag: str = "--volume", name: str | None = None) -> Mount:
        """``[NAME=]CLAIM[/SUBPATH]:/mount/path[:ro|:rw]``."""
        body = text
        if "=" in body.split(":", 1)[0]:
            name, body = body.split("=", 1)
        parts = body.split(":")
        mode = parts.pop() if len(parts) == 3 else "rw"
        if len(parts) != 2 or mode not in ("ro", "rw"):
            raise SpecError(
                f"{flag} {text!r} is not CLAIM:/path[:ro]: e.g. {flag} my-data:/data:ro "
                f"(PVC my-data at /data, read-only)."
            )
        claim, path = parts
        sub = None
        if "/" in claim:
            claim, sub = claim.split("/", 1)
        return cls(
            claim=claim,
            path=path,
            read_only=mode == "ro",
            sub_path=sub or None,
            name=name,
            flag=flag,
        )


@dataclass(frozen=True)
class Storage:
    """Volumes: PVC mounts and the memory-backed /dev/shm.

    ``shm`` is ``"auto"`` (8Gi per GPU, 2Gi without GPUs), ``"none"`` (no /dev/shm volume) or
    a quantity (``--shm 64Gi``).
    """

    mounts: tuple[Mount, ...] = ()
    shm: str = "auto"

    def __post_init__(self) -> None:
        if self.shm not in ("auto", "none"):
            check_quantity("--shm", self.shm)
        names: dict[str, Mount] = {}
        paths: dict[str, Mount] = {}
        for m in self.mounts:
            if m.volume_name in names:
                raise SpecError(
                    f"{m.flag} {m.claim}:{m.path}: volume name {m.volume_name!r} is used twice; "
                    f"name one with {m.flag} NAME=CLAIM:/path."
                )
            norm = m.path.rstrip("/")
            if norm in paths:
                raise SpecError(
                    f"{m.flag} {m.claim} and {paths[norm].flag} {paths[norm].claim} both mount "
                    f"at {m.path}: give each a different path."
                )
            names[m.volume_name] = m
            paths[norm] = m

    def shm_size(self, gpus: int) -> str | None:
        if self.shm == "none":
            return None
        if self.shm == "auto":
            return f"{8 * gpus}Gi" if gpus else "2Gi"
        return self.shm


@dataclass(frozen=True)
class SecretEnv:
    """``--secret-env NAME=SECRET/KEY``: an env var read from a Secret (never its value)."""

    name: str
    secret: str
    key: str

    def __post_init__(self) -> None:
        check_env_name("--secret-env", self.name, "HF_TOKEN=hf-token/token")
        check_dns_label("--secret-env", self.secret, "Secret name")
        if not re.match(r"^[-._a-zA-Z0-9]+$", self.key):
            raise SpecError(f"--secret-env key {self.key!r} is not a valid Secret key.")

    @classmethod
    def parse(cls, text: str) -> SecretEnv:
        name, sep, ref = text.partition("=")
        secret, slash, key = ref.partition("/")
        if not (sep and slash and name and secret and key):
            raise SpecError(
                f"--secret-env {text!r} is not NAME=SECRET/KEY: e.g. --secret-env "
                f"HF_TOKEN=hf-token/token reads key 'token' of Secret 'hf-token'."
            )
        return cls(name=name, secret=secret, key=key)
