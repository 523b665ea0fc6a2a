"""The job's options as flags and as YAML: the one front end of :class:`JobSpec`.

``%%ktrain`` and ``ktrain render`` add the same job flags to their parsers
(:func:`add_job_flags`, from the table :data:`JOB_FLAGS`). :func:`values_from_args` turns the
flags given into *values*, the plain data a YAML job file holds (:func:`values_from_yaml`);
:meth:`JobSpec.create` converts values into a spec, once, for all three
(:mod:`jupyter_ktrain.spec_values`). To add a job flag: one :func:`_flag` row in
:data:`JOB_FLAGS` naming the value it sets, and the field in :mod:`jupyter_ktrain.spec`.

Every mistake becomes one :class:`SpecError` that names the flag and what to do; nothing calls
``sys.exit`` inside a kernel.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from .errors import SpecError
from .spec import BACKENDS, KINDS, JobSpec, default_name
from .spec_scheduling import CLEAN_POD_POLICIES, RESTART_POLICIES

__all__ = [
    "JOB_FLAGS",
    "Flag",
    "add_job_flags",
    "build_parser",
    "env_names",
    "key_value",
    "merge_values",
    "parse_flags",
    "spec_from_args",
    "spec_from_values",
    "spec_from_yaml",
    "values_from_args",
    "values_from_yaml",
]


def key_value(flag: str, *, bare: bool = False) -> Callable[[str], tuple[str, str | None]]:
    """The argparse type of every ``KEY=VALUE`` flag: ``(KEY, VALUE)``; with ``bare``, ``KEY``
    alone is ``(KEY, None)``."""
    form = "KEY=VALUE or KEY" if bare else "KEY=VALUE"

    def parse(text: str) -> tuple[str, str | None]:
        key, sep, value = text.partition("=")
        if not key or not (sep or bare):
            raise argparse.ArgumentTypeError(f"{flag} {text!r} is not {form}")
        return key, value if sep else None

    return parse


@dataclass(frozen=True)
class Flag:
    """A job flag: ``argparse`` options, and the value it sets (``to``: a dotted path into the
    values, e.g. ``resources.gpus``; see :mod:`jupyter_ktrain.spec_values`)."""

    name: str
    to: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


def _flag(name: str, to: str | None = None, **options: Any) -> Flag:
    """A flag that sets ``to`` (default: the spec field of the flag's name)."""
    return Flag(name, to or name.lstrip("-").replace("-", "_"), options)


_PAIR = "KEY=VALUE"
_OFFLOAD = ("none", "cpu", "nvme")

# (argparse group title, or None for the parser's own; its flags), in --help order
JOB_FLAGS: tuple[tuple[str | None, tuple[Flag, ...]], ...] = (
    (
        None,
        (
            _flag("--name", help="job name (DNS-1035 label); default: from the function called"),
            _flag("--nodes", type=int, help="replicas (pods, or local torchrun agents)"),
            _flag("--procs-per-node", type=int, help="processes per node (default: one per GPU)"),
            _flag(
                "--env",
                action="append",
                type=key_value("--env", bare=True),
                metavar="KEY=VALUE|KEY",
                help="set a variable in every process; KEY alone passes the kernel's value (local)",
            ),
            _flag(
                "--hang-after",
                metavar="DURATION",
                help="name a rank that made no progress (no line, no report) for this long, "
                "e.g. 30s, 5m (default: the larger of 2 min and 10x its median step time)",
            ),
            _flag(
                "--warm",
                action="store_true",
                default=None,
                help="keep the nodes up after the run, each with torch imported: the next "
                "--warm cell of the same shape runs on them in about a second (idle limit "
                "15 min; `%%ktrain warm NAME --idle 30m` changes it, --idle 0 ends it)",
            ),
        ),
    ),
    (
        "kubernetes job",
        (
            _flag("--kind", choices=KINDS, help="job kind (default PyTorchJob)"),
            _flag("--namespace", help="namespace to create the job in"),
            _flag("--image", help="container image (the code layer is appended to it)"),
            _flag("--label", "labels", action="append", type=key_value("--label"), metavar=_PAIR),
            _flag("--runtime", help="TrainJob: ClusterTrainingRuntime name"),
            _flag("--ps", "ps_replicas", type=int, metavar="N", help="TFJob: parameter servers"),
        ),
    ),
    (
        "resources",
        (
            _flag("--gpus-per-node", "resources.gpus", type=int, metavar="N"),
            _flag(
                "--gpu-resource",
                "resources.gpu_resource",
                metavar="NAME",
                help="default nvidia.com/gpu",
            ),
            _flag("--cpu", "resources.cpu", help="CPU request per pod, e.g. 32"),
            _flag("--memory", "resources.memory", help="memory request per pod, e.g. 256Gi"),
            _flag("--cpu-limit", "resources.cpu_limit"),
            _flag("--memory-limit", "resources.memory_limit"),
        ),
    ),
    (
        "network",
        (
            _flag(
                "--rdma", "rdma.preset", metavar="infiniband|roce|tcp|FILE", help="network profile"
            ),
            _flag(
                "--rdma-profiles", "rdma.profiles", metavar="FILE", help="platform profiles file"
            ),
            _flag("--host-network", "rdma.host_network", action="store_true", default=None),
        ),
    ),
    (
        "deepspeed",
        (
            _flag("--deepspeed", "deepspeed.preset", metavar="zero1|zero2|zero3|PATH"),
            _flag("--bf16", "deepspeed.precision", action="store_const", const="bf16"),
            _flag("--fp16", "deepspeed.precision", action="store_const", const="fp16"),
            _flag("--micro-batch", "deepspeed.micro_batch", type=int, metavar="N"),
            _flag("--grad-accum", "deepspeed.grad_accum", type=int, metavar="N"),
            _flag("--train-batch-size", "deepspeed.train_batch_size", type=int, metavar="N"),
            _flag("--offload-optimizer", "deepspeed.offload_optimizer", choices=_OFFLOAD),
            _flag("--offload-param", "deepspeed.offload_param", choices=_OFFLOAD),
            _flag("--grad-clip", "deepspeed.gradient_clipping", type=float, metavar="X"),
            _flag(
                "--comm-dtype",
                "deepspeed.communication_data_type",
                choices=("fp32", "fp16", "bf16"),
            ),
        ),
    ),
    (
        "storage and environment",
        (
            _flag("--dataset", "storage.dataset", metavar="PVC[/SUB]:/path[:ro]"),
            _flag("--checkpoints", "storage.checkpoints", metavar="PVC[/SUB]:/path"),
            _flag(
                "--volume", "storage.mounts", action="append", metavar="[NAME=]PVC[/SUB]:/path[:ro]"
            ),
            _flag(
                "--shm",
                "storage.shm",
                metavar="SIZE|auto|none",
                help="/dev/shm size (default 8Gi/GPU)",
            ),
            _flag("--secret-env", action="append", metavar="NAME=SECRET/KEY"),
            _flag("--env-from-secret", "env_from_secrets", action="append", metavar="SECRET"),
            _flag(
                "--allow-secret",
                "allow_secrets",
                action="append",
                metavar="NAME",
                help="write the secret NAME into the job's code or spec anyway (readable by "
                "whoever can read them)",
            ),
        ),
    ),
    (
        "scheduling",
        (
            _flag("--elastic", metavar="MIN:MAX"),
            _flag(
                "--max-restarts",
                type=int,
                metavar="N",
                help="restart a fault (a killed, evicted, preempted or OOM-killed process, a "
                "deleted pod) up to N times before the job fails (default 3; the job's "
                "backoffLimit, and torchrun's --max-restarts with --elastic; locally, every "
                "node starts again); a bug in the code fails at once",
            ),
            _flag(
                "--node-selector",
                "scheduling.node_selector",
                action="append",
                type=key_value("--node-selector"),
                metavar=_PAIR,
            ),
            _flag(
                "--toleration",
                "scheduling.tolerations",
                action="append",
                metavar="KEY[=VALUE][:EFFECT]",
            ),
            _flag(
                "--affinity",
                "scheduling.affinity",
                metavar="YAML|@FILE",
                help="a Kubernetes Affinity",
            ),
            _flag("--priority-class", "scheduling.priority_class"),
            _flag("--gang", "scheduling.gang", choices=("volcano",)),
            _flag("--queue", "scheduling.queue", help="Volcano queue (with --gang volcano)"),
            _flag(
                "--kueue-queue",
                "scheduling.kueue_queue",
                help="Kueue LocalQueue: wait there for quota (default: config kueue_queue)",
            ),
            _flag(
                "--topology",
                "scheduling.topology",
                metavar="LEVEL",
                help="Kueue places every node of the job in one domain of this topology level "
                "(e.g. rack; needs --kueue-queue; default: config topology)",
            ),
            _flag(
                "--topology-preferred",
                "scheduling.topology_preferred",
                metavar="LEVEL",
                help="as --topology, but a job that fits no one domain is spread rather than kept "
                "waiting",
            ),
            _flag(
                "--service-account",
                "scheduling.service_account",
                help="ServiceAccount of the job's pods (default: none, and no API token)",
            ),
            _flag(
                "--image-pull-secret",
                "scheduling.image_pull_secrets",
                action="append",
                metavar="SECRET",
            ),
            _flag(
                "--init-container",
                "scheduling.init_containers",
                action="append",
                metavar="'NAME=IMAGE CMD...'",
            ),
        ),
    ),
    (
        "monitoring",
        (
            _flag(
                "--metrics-port",
                type=int,
                metavar="PORT",
                help="serve GPU and ktrain.report metrics for Prometheus on PORT in every node "
                "(local node i: PORT+i); on Kubernetes with a Service, and a ServiceMonitor "
                "where the Prometheus operator is installed",
            ),
        ),
    ),
    (
        "tracking",
        (
            _flag(
                "--mlflow",
                metavar="URI",
                help="log the job as an MLflow run at this tracking server, from the notebook "
                "(default: config mlflow; off: not this job)",
            ),
            _flag("--experiment", metavar="NAME", help="MLflow experiment (default: ktrain)"),
        ),
    ),
    (
        "run policy",
        (
            _flag("--restart-policy", "run_policy.restart_policy", choices=RESTART_POLICIES),
            _flag("--backoff-limit", "run_policy.backoff_limit", type=int, metavar="N"),
            _flag(
                "--ttl",
                "run_policy.ttl_seconds_after_finished",
                type=int,
                metavar="SECONDS",
                help="ttlSecondsAfterFinished",
            ),
            _flag(
                "--active-deadline",
                "run_policy.active_deadline_seconds",
                type=int,
                metavar="SECONDS",
            ),
            _flag("--clean-pod-policy", "run_policy.clean_pod_policy", choices=CLEAN_POD_POLICIES),
        ),
    ),
)


def _job_flags() -> list[Flag]:
    return [flag for _, flags in JOB_FLAGS for flag in flags]


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """Add every job flag (all optional: an absent flag leaves the value to YAML or the spec's
    default) to ``parser``."""
    for title, flags in JOB_FLAGS:
        group = parser if title is None else parser.add_argument_group(title)
        for flag in flags:
            group.add_argument(flag.name, dest=flag.dest, **flag.options)


def values_from_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The values (as in a YAML job file) of the job flags given in ``ns``.

    Raises :class:`SpecError` for flags that only apply with another flag or conflict."""
    given = [f for f in _job_flags() if getattr(ns, f.dest, None) is not None]
    if {"--bf16", "--fp16"} <= {f.name for f in given}:
        raise SpecError("--bf16 and --fp16 conflict: pick one precision.")
    values: dict[str, Any] = {}
    for flag in given:
        *parents, key = flag.to.split(".")
        into = values
        for parent in parents:
            into = into.setdefault(parent, {})
        into[key] = getattr(ns, flag.dest)
    _check_presets(values, given)
    env = values.pop("env", None) or []
    if any(v is not None for _, v in env):
        values["env"] = [(k, v) for k, v in env if v is not None]
    if any(v is None for _, v in env):
        values["pass_env"] = [k for k, v in env if v is None]
    return values


def _check_presets(values: dict[str, Any], given: list[Flag]) -> None:
    """Tuning flags of DeepSpeed and of the network need the flag that picks the preset."""
    deepspeed = values.get("deepspeed")
    if deepspeed is not None and "preset" not in deepspeed:
        used = sorted(f.name for f in given if f.to.startswith("deepspeed."))
        raise SpecError(
            f"{', '.join(used)} only apply with --deepspeed: add --deepspeed "
            f"zero1|zero2|zero3|PATH, or set them in your training code."
        )
    rdma = values.get("rdma")
    if rdma is not None and "preset" not in rdma:
        if rdma.get("host_network"):
            raise SpecError(
                "--host-network needs a network profile: add --rdma infiniband|roce|tcp "
                "(it sets the NCCL interfaces for the host's network)."
            )
        raise SpecError("--rdma-profiles holds the profiles --rdma picks from: add --rdma NAME.")


def env_names(ns: argparse.Namespace) -> set[str]:
    """Variables the job gets by reference: ``--env KEY`` and ``--secret-env KEY=...``."""
    names = {k for k, v in ns.env or () if v is None}
    for item in getattr(ns, "secret_env", None) or []:
        names.add(str(item).split("=", 1)[0])
    return names


# --------------------------------------------------------------------------- YAML job files


def values_from_yaml(path_or_text: str | os.PathLike[str]) -> dict[str, Any]:
    """The values of a YAML job file (or YAML text). A relative file name in it (``rdma``,
    ``deepspeed``) is the file beside the job file, when there is one."""
    text = str(path_or_text)
    folder: Path | None = None
    if "\n" not in text and Path(text).is_file():
        folder = Path(text).resolve().parent
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
    return data if folder is None else _files_beside(data, folder)


def _files_beside(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    def beside(name: Any) -> Any:
        there = folder / str(name)
        return str(there) if not os.path.isabs(str(name)) and there.is_file() else name

    out = dict(data)
    for key in ("rdma", "deepspeed"):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = beside(value)
        elif isinstance(value, dict):
            out[key] = {k: beside(v) if k in ("file", "profiles") else v for k, v in value.items()}
    return out


def spec_from_yaml(path_or_text: str | os.PathLike[str], **overrides: Any) -> JobSpec:
    """A :class:`JobSpec` from a YAML file (or YAML text); ``overrides`` win over the file."""
    return JobSpec.create(**{**values_from_yaml(path_or_text), **overrides})


def merge_values(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``: mappings merge key by key, anything else in ``top`` replaces."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- %%ktrain


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SpecError(f"{message}. See `{self.prog} --help` for every flag.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise SpecError(message or f"{self.prog}: stopped")


def build_parser(prog: str = "%%ktrain") -> argparse.ArgumentParser:
    """The flags of ``%%ktrain``: the job flags, and how the cell runs the job."""
    p = _Parser(prog=prog, add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true", help="show the flags and exit")
    add_job_flags(p)
    p.add_argument("--backend", choices=BACKENDS, default=None, help="where to run (default local)")
    p.add_argument("--dry-run", action="store_true", help="print the exact launch; run nothing")
    p.add_argument("--detach", action="store_true", help="submit and return at once; do not follow")
    p.add_argument(
        "--replace",
        action="store_true",
        help="delete an earlier job of the same --name first (re-running a named cell)",
    )
    _add_sweep_flags(p.add_argument_group("sweep (many trials of the cell; README: Sweeps)"))
    return p


def _add_sweep_flags(g: argparse._ArgumentGroup) -> None:
    """The sweep's flags (read by :func:`jupyter_ktrain.sweep_spec.options.sweep_options`)."""
    g.add_argument(
        "--sweep",
        action="append",
        metavar="NAME=DIST",
        help="a name the cell reads, bound per trial: uniform(a,b), loguniform(a,b), "
        "intuniform(a,b), choice(v1,v2,...); repeat for each name",
    )
    g.add_argument("--trials", type=int, metavar="N", help="trials (default 10; grid: all)")
    g.add_argument("--parallel", type=int, metavar="P", help="trials at once (default 1)")
    g.add_argument(
        "--objective",
        metavar="NAME:min|max",
        help="the reported metric's last value (ktrain.report), or result:max (the cell's value)",
    )
    g.add_argument(
        "--search",
        choices=("grid", "random", "tpe"),
        help="Optuna's sampler (default tpe; grid when every name is a choice)",
    )
    g.add_argument(
        "--prune-after",
        type=int,
        metavar="STEPS",
        help="stop a trial worse than the median of the others at a step after this (default 5)",
    )
    g.add_argument("--no-prune", action="store_true", help="run every trial to its end")
    g.add_argument(
        "--stop-on-failure", action="store_true", help="end the sweep at the first failed trial"
    )


def parse_flags(line: str, prog: str = "%%ktrain") -> argparse.Namespace:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise SpecError(f"{prog}: cannot split the flags ({exc}); check the quotes.") from None
    return build_parser(prog).parse_args(argv)


def _default_backend() -> str:
    from .backends.registry import default_backend_name

    return default_backend_name()


def spec_from_values(values: Mapping[str, Any], entry: str, backend: str | None) -> JobSpec:
    """A validated JobSpec from job ``values``: ``entry`` (the function called) names the
    job when no name was given, the configured backend runs it when ``backend`` is None."""
    values = dict(values)
    values.setdefault("name", default_name(entry))
    values["backend"] = backend or _default_backend()
    return JobSpec.create(**values)


def spec_from_args(ns: argparse.Namespace, entry: str = "ktrain", **defaults: Any) -> JobSpec:
    """A validated JobSpec from ``%%ktrain`` flags; ``entry`` names the job when --name is
    absent, and the configured backend runs it when --backend is."""
    return spec_from_values(values_from_args(ns), entry, ns.backend or defaults.get("backend"))
