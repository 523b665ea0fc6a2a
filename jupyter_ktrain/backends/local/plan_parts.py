"""The parts of a local job's plan besides its :class:`~.request.LocalRequest`: the
rendezvous port, the node processes' import path and agent settings, the DeepSpeed config, the
restart limit, the settings that mean something on a cluster only (said in a note), and the
dry run's text. Pure apart from :func:`free_port`'s and :func:`port_free`'s probes."""

from __future__ import annotations

import shlex
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ...errors import BackendError
from ...kinds import DEFAULT_KIND, KIND_TABLE

if TYPE_CHECKING:
    from ...spec.job import JobSpec
    from .request import NodeLaunch

__all__ = [
    "cluster_only_settings",
    "deepspeed_files",
    "describe_plan",
    "free_port",
    "local_max_restarts",
    "metrics_env",
    "package_root",
    "port_free",
]


def free_port(taken: set[int]) -> int:
    """A port nothing listens on now and no other local job of ours planned to use."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            return port
    raise BackendError("Could not find a free TCP port on 127.0.0.1 for the job's rendezvous.")


def port_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 now (a restart takes its old port again)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's TCPStore binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def package_root() -> str:
    """Directory that holds this package, so node processes import the same jupyter_ktrain."""
    return str(Path(__file__).resolve().parents[3])


def metrics_env(spec: JobSpec, node: int) -> dict[str, str]:
    """The agent's Prometheus endpoint: node i on 127.0.0.1, port ``--metrics-port`` + i."""
    if spec.metrics_port is None:
        return {}
    return {
        "KTRAIN_METRICS_PORT": str(spec.metrics_port + node),
        "KTRAIN_METRICS_HOST": "127.0.0.1",
        "KTRAIN_REPLICA": f"{spec.name}-node-{node}",
    }


def deepspeed_files(spec: JobSpec, program_source: str | None = None) -> dict[str, bytes]:
    """The generated or given DeepSpeed config, checked against the world size already (and
    against the program's ``TrainingArguments`` when it uses the Transformers Trainer)."""
    if spec.deepspeed is None:
        return {}
    from ...spec.deepspeed import CONFIG_FILE, config_bytes

    return {CONFIG_FILE: config_bytes(spec.deepspeed, spec.world_size, program_source)}


def local_max_restarts(spec: JobSpec) -> int:
    """How often a local job restarts every node after a fault (``--max-restarts``, default
    :data:`~jupyter_ktrain.spec.scheduling.DEFAULT_MAX_RESTARTS`); ``--restart-policy Never``: 0."""
    policy = spec.run_policy
    return 0 if policy.restart_policy == "Never" else int(policy.max_restarts)


def cluster_only_settings(spec: JobSpec) -> list[str]:
    """Settings that only mean something on a cluster; the local backend runs without them
    and says so before the job starts (a note), so the same cell runs here unchanged. CPU and
    memory requests and limits are among them: nothing limits a local job's memory (a
    per-process rlimit would not be the pod's limit, and breaks CUDA's address space)."""
    from ...spec.job import JobSpec

    default = JobSpec(name=spec.name)
    res = spec.resources
    checks = {
        "--image": spec.image,
        # requests and limits are the pod's; local nodes share this machine, unlimited
        "--cpu": res.cpu,
        "--memory": res.memory,
        "--cpu-limit": res.cpu_limit,
        "--memory-limit": res.memory_limit,
        "--namespace": spec.namespace,
        "--rdma": spec.rdma,
        "storage (--dataset/--checkpoints/--volume/--shm)": spec.storage != default.storage,
        "scheduling (--node-selector/--toleration/--gang/...)": (
            spec.scheduling != default.scheduling
        ),
        "--secret-env/--env-from-secret": spec.secret_env or spec.env_from_secrets,
        "--kind " + spec.kind: spec.kind != DEFAULT_KIND and not KIND_TABLE[spec.kind].driver_only,
    }
    return [flag for flag, given in checks.items() if given]


def describe_plan(spec: JobSpec, nodes: Sequence[NodeLaunch]) -> str:
    lines = [
        f"# {spec.name}: {spec.nodes} node(s) x {spec.nproc} process(es) on the local backend",
        f"# a fault (a node exit code >= 128: a rank killed, OOM, a lost peer) stops every node "
        f"and starts them all again, up to {local_max_restarts(spec)} time(s) (--max-restarts); "
        f"a bug (exit code 1-127) fails the job at once",
        "# each node runs in a new session with the kernel's environment plus:",
    ]
    ignored = cluster_only_settings(spec)
    if ignored:
        lines.insert(1, f"# cluster-only, not used here: {', '.join(ignored)}")
    if spec.pass_env:
        names = ", ".join(spec.pass_env)
        lines.append(f"# from the kernel's environment (never written down): {names}")
    for i, node in enumerate(nodes):
        lines.append(f"\n# node {i}")
        lines.append(f"cd {shlex.quote(node.cwd)}")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(node.env.items()))
        lines.append(f"env {env} \\\n  {shlex.join(node.argv)}")
    return "\n".join(lines) + "\n"
