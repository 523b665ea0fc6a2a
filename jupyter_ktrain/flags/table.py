"""The job flags: one table, :data:`JOB_FLAGS`, that ``%%ktrain`` and ``ktrain render`` both
add to their parsers (:func:`jupyter_ktrain.flags.parse.add_job_flags`).

Each row names the value it sets, as a YAML job file writes it (``--gpus-per-node`` ->
``resources.gpus``); :meth:`JobSpec.create` converts values into a spec, once
(:mod:`jupyter_ktrain.spec.values`). To add a job flag: one :func:`_flag` row in
:data:`JOB_FLAGS` naming the value it sets, and the field in :mod:`jupyter_ktrain.spec.job`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..spec.job import KINDS
from ..spec.scheduling import CLEAN_POD_POLICIES, RESTART_POLICIES

__all__ = ["JOB_FLAGS", "Flag", "key_value"]


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
    values, e.g. ``resources.gpus``; see :mod:`jupyter_ktrain.spec.values`)."""

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
