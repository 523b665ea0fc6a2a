"""The cluster flags of ``%%ktrain`` and ``ktrain render``, and YAML job specs.

:func:`add_arguments` adds every flag about where and how a job runs on Kubernetes to an
``argparse`` parser that already has ``--name``, ``--nodes``, ``--procs-per-node``,
``--backend``, ``--env`` and ``--dry-run``; :func:`spec_kwargs` turns the parsed flags into
keyword arguments for :meth:`JobSpec.create` (only flags that were given, so the spec's
defaults apply). :func:`spec_from_yaml` reads the same options from a YAML file, so the
manifests can live in git. Profile and config files (``--rdma FILE``, ``--deepspeed FILE``)
are read here; everything after is pure.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError
from .spec import KINDS, JobSpec, Mount
from .spec_parts import CLEAN_POD_POLICIES, RESTART_POLICIES

__all__ = ["add_arguments", "spec_from_yaml", "spec_kwargs", "yaml_kwargs"]

_DS_TUNING = (
    "micro_batch",
    "grad_accum",
    "train_batch_size",
    "offload_optimizer",
    "offload_param",
    "grad_clip",
    "comm_dtype",
)


def _pair(flag: str) -> Any:
    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"{flag} {text!r} is not KEY=VALUE")
        return key, value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the Kubernetes flags (all optional; defaults come from :class:`JobSpec`)."""
    g = parser.add_argument_group("kubernetes job")
    g.add_argument("--kind", choices=KINDS, help="job kind (default PyTorchJob)")
    g.add_argument("--namespace", help="namespace to create the job in")
    g.add_argument("--image", help="container image (the code layer is appended to it)")
    g.add_argument("--label", action="append", type=_pair("--label"), metavar="KEY=VALUE")
    g.add_argument("--runtime", help="TrainJob: ClusterTrainingRuntime name")
    g.add_argument("--ps", type=int, metavar="N", help="TFJob: parameter servers")

    r = parser.add_argument_group("resources")
    r.add_argument("--gpus-per-node", type=int, metavar="N")
    r.add_argument("--gpu-resource", metavar="NAME", help="default nvidia.com/gpu")
    r.add_argument("--cpu", help="CPU request per pod, e.g. 32")
    r.add_argument("--memory", help="memory request per pod, e.g. 256Gi")
    r.add_argument("--cpu-limit")
    r.add_argument("--memory-limit")

    n = parser.add_argument_group("network")
    n.add_argument("--rdma", metavar="infiniband|roce|tcp|FILE", help="network profile")
    n.add_argument("--rdma-profiles", metavar="FILE", help="platform profiles file")
    n.add_argument("--host-network", action="store_true", default=None)

    d = parser.add_argument_group("deepspeed")
    d.add_argument("--deepspeed", metavar="zero1|zero2|zero3|PATH")
    d.add_argument("--bf16", action="store_true", default=None)
    d.add_argument("--fp16", action="store_true", default=None)
    d.add_argument("--micro-batch", type=int, metavar="N")
    d.add_argument("--grad-accum", type=int, metavar="N")
    d.add_argument("--train-batch-size", type=int, metavar="N")
    d.add_argument("--offload-optimizer", choices=("none", "cpu", "nvme"))
    d.add_argument("--offload-param", choices=("none", "cpu", "nvme"))
    d.add_argument("--grad-clip", type=float, metavar="X")
    d.add_argument("--comm-dtype", choices=("fp32", "fp16", "bf16"))

    s = parser.add_argument_group("storage and environment")
    s.add_argument("--dataset", metavar="PVC[/SUB]:/path[:ro]")
    s.add_argument("--checkpoints", metavar="PVC[/SUB]:/path")
    s.add_argument("--volume", action="append", metavar="[NAME=]PVC[/SUB]:/path[:ro]")
    s.add_argument("--shm", metavar="SIZE|auto|none", help="/dev/shm size (default 8Gi/GPU)")
    s.add_argument("--secret-env", action="append", metavar="NAME=SECRET/KEY")
    s.add_argument("--env-from-secret", action="append", metavar="SECRET")
    s.add_argument(
        "--allow-secret",
        action="append",
        default=[],
        metavar="NAME",
        help="write the secret NAME into the job's code or spec anyway (readable by whoever "
        "can read them)",
    )

    c = parser.add_argument_group("scheduling")
    c.add_argument("--elastic", metavar="MIN:MAX")
    c.add_argument(
        "--max-restarts",
        type=int,
        metavar="N",
        help="restart a fault (a killed, evicted, preempted or OOM-killed process, a deleted "
        "pod) up to N times before the job fails (default 3; the job's backoffLimit, and "
        "torchrun's --max-restarts with --elastic; locally, every node starts again); a bug "
        "in the code fails at once",
    )
    c.add_argument(
        "--node-selector", action="append", type=_pair("--node-selector"), metavar="KEY=VALUE"
    )
    c.add_argument("--toleration", action="append", metavar="KEY[=VALUE][:EFFECT]")
    c.add_argument("--affinity", metavar="YAML|@FILE", help="a Kubernetes Affinity")
    c.add_argument("--priority-class")
    c.add_argument("--gang", choices=("volcano",))
    c.add_argument("--queue", help="Volcano queue (with --gang volcano)")
    c.add_argument("--kueue-queue", help="Kueue LocalQueue")
    c.add_argument("--service-account")
    c.add_argument("--image-pull-secret", action="append", metavar="SECRET")
    c.add_argument("--init-container", action="append", metavar="'NAME=IMAGE CMD...'")

    m = parser.add_argument_group("monitoring")
    m.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve GPU and ktrain.report metrics for Prometheus on PORT in every node "
        "(local node i: PORT+i); on Kubernetes with a Service, and a ServiceMonitor where "
        "the Prometheus operator is installed",
    )

    p = parser.add_argument_group("run policy")
    p.add_argument("--restart-policy", choices=RESTART_POLICIES)
    p.add_argument("--backoff-limit", type=int, metavar="N")
    p.add_argument("--ttl", type=int, metavar="SECONDS", help="ttlSecondsAfterFinished")
    p.add_argument("--active-deadline", type=int, metavar="SECONDS")
    p.add_argument("--clean-pod-policy", choices=CLEAN_POD_POLICIES)


def _given(ns: argparse.Namespace, *names: str) -> dict[str, Any]:
    return {n: getattr(ns, n) for n in names if getattr(ns, n, None) is not None}


def _affinity(text: str) -> Any:
    try:
        value = yaml.safe_load(Path(text[1:]).read_text() if text.startswith("@") else text)
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"--affinity {text!r} is not readable YAML ({exc}).") from None
    if not isinstance(value, dict):
        raise SpecError(
            "--affinity must be a YAML mapping, e.g. --affinity "
            "'{nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: ...}}'."
        )
    return value


def _deepspeed(ns: argparse.Namespace) -> dict[str, Any]:
    from .backends.kubernetes.deepspeed import resolve_deepspeed

    if ns.bf16 and ns.fp16:
        raise SpecError("--bf16 and --fp16 conflict: pick one precision.")
    tuning = _given(ns, *_DS_TUNING)
    if ns.deepspeed is None:
        used = sorted(f"--{k.replace('_', '-')}" for k in tuning)
        used += [f for f, v in (("--bf16", ns.bf16), ("--fp16", ns.fp16)) if v]
        if used:
            raise SpecError(
                f"{', '.join(used)} only apply with --deepspeed: add --deepspeed "
                f"zero1|zero2|zero3|PATH, or set them in your training code."
            )
        return {}
    precision = "bf16" if ns.bf16 else "fp16" if ns.fp16 else None
    renames = {"grad_clip": "gradient_clipping", "comm_dtype": "communication_data_type"}
    flags = {renames.get(k, k): v for k, v in tuning.items()}
    return {"deepspeed": resolve_deepspeed(ns.deepspeed, precision=precision, **flags)}


def _rdma(ns: argparse.Namespace) -> dict[str, Any]:
    from .backends.kubernetes.rdma import resolve_profile

    if ns.rdma is None:
        if ns.host_network:
            raise SpecError(
                "--host-network needs a network profile: add --rdma infiniband|roce|tcp "
                "(it sets the NCCL interfaces for the host's network)."
            )
        return {}
    profile = resolve_profile(ns.rdma, profiles_file=ns.rdma_profiles)
    if ns.host_network:
        profile = replace(profile, host_network=True)
    return {"rdma": profile}


def _storage(ns: argparse.Namespace) -> dict[str, Any]:
    mounts = []
    if ns.dataset:
        mounts.append(Mount.parse(ns.dataset, flag="--dataset", name="datasets"))
    if ns.checkpoints:
        mounts.append(Mount.parse(ns.checkpoints, flag="--checkpoints", name="checkpoints"))
    mounts += [Mount.parse(v, flag="--volume") for v in ns.volume or ()]
    out: dict[str, Any] = {}
    if mounts:
        out["mounts"] = tuple(mounts)
    if ns.shm is not None:
        out["shm"] = ns.shm
    return {"storage": out} if out else {}


def _scheduling(ns: argparse.Namespace) -> dict[str, Any]:
    out = _given(ns, "priority_class", "gang", "queue", "kueue_queue", "service_account")
    if ns.node_selector:
        out["node_selector"] = tuple(ns.node_selector)
    if ns.toleration:
        out["tolerations"] = list(ns.toleration)
    if ns.affinity:
        out["affinity"] = _affinity(ns.affinity)
    if ns.image_pull_secret:
        out["image_pull_secrets"] = list(ns.image_pull_secret)
    if ns.init_container:
        out["init_containers"] = list(ns.init_container)
    return {"scheduling": out} if out else {}


def _run_policy(ns: argparse.Namespace) -> dict[str, Any]:
    names = {
        "restart_policy": "restart_policy",
        "backoff_limit": "backoff_limit",
        "ttl": "ttl_seconds_after_finished",
        "active_deadline": "active_deadline_seconds",
        "clean_pod_policy": "clean_pod_policy",
    }
    out = {names[k]: v for k, v in _given(ns, *names).items()}
    if ns.max_restarts is not None:
        if out.get("backoff_limit", ns.max_restarts) != ns.max_restarts:
            raise SpecError(
                "--max-restarts and --backoff-limit set the same limit differently: keep one."
            )
        out["backoff_limit"] = ns.max_restarts
    return {"run_policy": out} if out else {}


def _elastic(ns: argparse.Namespace) -> dict[str, Any]:
    from .spec import Elastic

    if ns.elastic is None:
        return {}
    e = Elastic.parse(ns.elastic)
    if ns.max_restarts is not None:
        e = Elastic(e.min_nodes, e.max_nodes, ns.max_restarts)
    return {"elastic": e}


def spec_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """``JobSpec.create`` keyword arguments from the flags :func:`add_arguments` defined.

    Only given flags appear. Raises :class:`SpecError` for flags that conflict or need
    another flag. Reads ``--rdma FILE``, ``--rdma-profiles`` and ``--deepspeed FILE``.
    """
    out: dict[str, Any] = _given(ns, "kind", "namespace", "image", "runtime", "metrics_port")
    if ns.ps is not None:
        out["ps_replicas"] = ns.ps
    if ns.label:
        out["labels"] = tuple(ns.label)
    res = _given(ns, "cpu", "memory", "cpu_limit", "memory_limit", "gpu_resource")
    if ns.gpus_per_node is not None:
        res["gpus"] = ns.gpus_per_node
    if res:
        out["resources"] = res
    if ns.secret_env:
        out["secret_env"] = list(ns.secret_env)
    if ns.env_from_secret:
        out["env_from_secrets"] = tuple(ns.env_from_secret)
    if ns.allow_secret:
        out["allow_secrets"] = tuple(ns.allow_secret)
    for part in (_rdma, _deepspeed, _storage, _scheduling, _run_policy, _elastic):
        out.update(part(ns))
    return out


# --------------------------------------------------------------------------- YAML specs


def yaml_kwargs(data: dict[str, Any], base_dir: Path | None = None) -> dict[str, Any]:
    """Resolve the file-backed parts of a YAML spec (``rdma``, ``deepspeed``) into kwargs.

    ``rdma``: a profile name, a profile file, or a profile mapping. ``deepspeed``: ``zero3``,
    a config file, or a mapping with ``preset`` (zeroN) or ``file`` plus DeepSpeed fields.
    Relative file paths are taken from ``base_dir`` (the YAML file's folder).
    """
    from .backends.kubernetes.deepspeed import resolve_deepspeed
    from .backends.kubernetes.rdma import resolve_profile

    def local(path: str) -> str:
        return str(base_dir / path) if base_dir and not os.path.isabs(path) else path

    out = dict(data)
    rdma = out.get("rdma")
    if isinstance(rdma, str):
        known = rdma in ("infiniband", "roce", "tcp")
        out["rdma"] = resolve_profile(rdma if known else local(rdma))
    ds = out.get("deepspeed")
    if isinstance(ds, str):
        out["deepspeed"] = resolve_deepspeed(ds if ds.startswith("zero") else local(ds))
    elif isinstance(ds, dict) and ("preset" in ds or "file" in ds):
        rest = dict(ds)
        source = rest.pop("preset", None) or local(rest.pop("file"))
        out["deepspeed"] = resolve_deepspeed(source, **rest)
    return out


def spec_from_yaml(path_or_text: str | os.PathLike[str], **overrides: Any) -> JobSpec:
    """A :class:`JobSpec` from a YAML file (or YAML text); ``overrides`` win over the file."""
    text = str(path_or_text)
    base: Path | None = None
    if "\n" not in text and Path(text).is_file():
        base = Path(text).resolve().parent
        text = Path(text).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"The job spec is not valid YAML: {exc}.") from None
    if not isinstance(data, dict):
        raise SpecError(
            f"The job spec must be a YAML mapping of job options (name, nodes, ...), got "
            f"{type(data).__name__}: check the file passed with -f."
        )
    kwargs = yaml_kwargs(data, base)
    kwargs.update(overrides)
    return JobSpec.create(**kwargs)
