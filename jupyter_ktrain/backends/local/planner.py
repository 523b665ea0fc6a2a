"""A new local job's plan: :class:`Planner`, what the local backend's dry run is (and its warm
part's, for a new warm job): each node started exactly as a PyTorchJob replica is (the command
and the ``PET_*``/``MASTER_*`` environment the Training Operator gives it, on ``127.0.0.1``), a
rendezvous port no live job uses, this machine's GPUs split between the nodes, and the notes a
user should read before it starts. Pure apart from reading the store (the ports in use) and
asking for the machine's GPUs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...kinds import KIND_TABLE
from ...pod.agent.warm import CONTROL_ENV
from ...pod.checkpoint.plain import CHECKPOINTS_ENV
from ...pod.exits import STOP_WHY_ENV
from ...pod.launch import node_command, operator_env
from ...pod.stacks import STACKS_DIR_ENV
from ..base import LaunchPlan
from .folders import JobFolders
from .gpus import split_gpus
from .plan_parts import (
    cluster_only_settings,
    deepspeed_files,
    describe_plan,
    free_port,
    local_max_restarts,
    metrics_env,
    package_root,
)
from .procs import MARKER_ENV
from .request import LocalRequest, NodeLaunch, read_plan
from .state import LocalState, read_state

if TYPE_CHECKING:
    from ...capture import CapturedProgram
    from ...pod.agent.sampler import GpuInfo
    from ...spec.job import JobSpec

__all__ = ["BACKEND", "RESTART_DELAY_S", "Planner"]

BACKEND = "local"
# between stopping every node after a fault and starting them all again, from the second restart
# on, doubling each time (the first is at once: supervisor.restart_backoff); a cancel in it
# starts nothing more
RESTART_DELAY_S = 1.0


@dataclass(frozen=True)
class Planner:
    """Plans new jobs of the store ``folders``: their nodes run ``python``, and share the GPUs
    ``gpus`` lists (asked only when a job wants GPUs)."""

    folders: JobFolders
    python: str
    gpus: Callable[[], list[GpuInfo]]

    def ports_in_use(self) -> set[int]:
        """The rendezvous ports of the live jobs (a restart may have moved one)."""
        ports = set()
        for status in self.folders.list_jobs():
            if not status.terminal:
                job_dir = self.folders.job_dir(status.name)
                try:
                    ports.add(read_plan(job_dir).master_port)
                except (OSError, ValueError):  # PlanError too: a folder we cannot read
                    continue
                with contextlib.suppress(OSError, ValueError):  # StateError too
                    moved = (read_state(job_dir) or LocalState()).master_port  # on a restart
                    ports.update([moved] if moved else [])
        return ports

    def plan(
        self,
        spec: JobSpec,
        program: CapturedProgram,
        warm_notes: tuple[str, ...] = (),
        replaces: str = "",
    ) -> LaunchPlan[LocalRequest]:
        """The plan of a new job of ``spec``: each node's command and environment, a free
        rendezvous port, the files it ships; ``warm_notes`` said before the rest, ``replaces``
        the name of a job deleted first (a warm job of another shape)."""
        kind = KIND_TABLE[spec.kind]
        asked = spec.nodes
        if kind.driver_only:  # one driver; ray.init() in it starts Ray on this machine
            spec = spec.evolve(nodes=1, procs_per_node=1)
        job_dir = self.folders.job_dir(spec.name)
        code_dir = job_dir / "code"
        port = free_port(self.ports_in_use())
        marker = uuid.uuid4().hex
        python_path = os.pathsep.join(
            p for p in (str(code_dir), package_root(), os.environ.get("PYTHONPATH", "")) if p
        )
        gpu_env = split_gpus(spec, self.gpus() if spec.resources.gpus else [])
        nodes = []
        for node in range(spec.nodes):
            env = {
                **operator_env(
                    nnodes=spec.nodes,
                    nproc_per_node=spec.nproc,
                    node_rank=node,
                    master_addr="127.0.0.1",
                    master_port=port,
                ),
                "PYTHONPATH": python_path,
                "PYTHONUNBUFFERED": "1",
                # torchrun's default for several processes, set here so it does not print a
                # banner about it; a value from --env or the kernel's environment wins
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                "KTRAIN_JOB_NAME": spec.name,
                # ktrain.checkpoint(): in the job's folder, so a restarted node finds it
                CHECKPOINTS_ENV: str(job_dir / "checkpoints"),
                **gpu_env[node],
                **metrics_env(spec, node),
                **dict(kind.driver_env),
                MARKER_ENV: marker,
                STOP_WHY_ENV: str(job_dir / "stop-why"),  # why the supervisor stopped a node
                # the ranks' sockets for `stacks`: short (a socket path has 108 bytes), the job's
                STACKS_DIR_ENV: os.path.join(tempfile.gettempdir(), f"ktrain-stacks-{marker[:16]}"),
                **spec.env_dict,
            }
            # a CPU job's agent samples no GPU: nothing to say of NVML on each node's start
            argv = node_command(str(code_dir), python=self.python, gpus=bool(spec.resources.gpus))
            if spec.warm:  # a warm agent: its runs' programs come through the job's folder
                argv = [self.python, "-m", "jupyter_ktrain.pod.agent.warm"]
                env["PYTHONPATH"] = python_path.split(os.pathsep, 1)[1]  # no code dir: per run
                env[CONTROL_ENV] = str(job_dir)
                env.pop("KTRAIN_METRICS_PORT", None)
            if spec.deepspeed is not None:
                env.setdefault("KTRAIN_DEEPSPEED_CONFIG", str(code_dir / "ds_config.json"))
            nodes.append(NodeLaunch(tuple(argv), env, str(code_dir)))
        request = LocalRequest(
            master_port=port,
            marker=marker,
            nodes=tuple(nodes),
            max_restarts=0 if spec.warm else local_max_restarts(spec),
            restart_delay_s=RESTART_DELAY_S,
            warm=spec.warm,
            replaces=replaces,
            hang_after_s=spec.hang_after,
        )
        files = {**program.files, **deepspeed_files(spec, program.source)}
        ignored = cluster_only_settings(spec)
        unlimited = "; nothing limits a local job's memory" if "-memory" in str(ignored) else ""
        said = f"local run: {', '.join(ignored)} apply on --backend kubernetes only{unlimited}"
        text = describe_plan(spec, nodes)
        notes: tuple[str, ...] = (*warm_notes, *((said,) if ignored else ()))
        if kind.driver_only:
            notes = (
                *notes,
                f"local run: the {spec.kind}'s driver runs once here; ray.init() in it starts "
                f"Ray on this machine's CPUs in place of the {asked} node(s) a cluster gives it",
            )
        return LaunchPlan(spec, program, BACKEND, request, text, files, notes)
