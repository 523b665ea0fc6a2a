"""Which rank and which node this process is, in every kind. Pure; standard library.

Each launcher names the global rank its own way, so every reader asks :func:`global_rank`:

- torchrun (PyTorchJob, TrainJob, the local backend) and the Training Operator's XGBoostJob
  set ``RANK``;
- Open MPI (an MPIJob's ranks) sets ``OMPI_COMM_WORLD_RANK``, MPICH/Intel MPI ``PMI_RANK``;
- a RayJob's pods set ``KTRAIN_RANK=0`` (ktrain's own, last in line): the processes Ray starts
  there for the driver's tasks are the driver's, whose rank is 0, so a task's report is its;
- a TFJob sets only ``TF_CONFIG``: ``{"cluster": {"chief": [...], "worker": [...]}, "task":
  {"type": "worker", "index": 1}}``. Ranks follow the kind table's replica order (chief,
  master, worker, ps), so worker 1 behind one chief is rank 2.

:func:`node_index` is the replica (node) a process belongs to: what the agent labels its GPU
samples and metrics with.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from . import mpi

__all__ = ["RANK_ENV", "TF_ORDER", "global_rank", "node_index", "tf_head"]

RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "KTRAIN_RANK")  # the first set wins
TF_ORDER = ("chief", "master", "worker", "ps")  # TF_CONFIG task types in rank order


def global_rank(env: Mapping[str, str] | None = None) -> int | None:
    """This process's global rank (see module docstring); None outside a job."""
    env = os.environ if env is None else env
    for key in RANK_ENV:
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    raw = env.get("TF_CONFIG")
    return _tf_rank(raw) if raw else None


def tf_head(env: Mapping[str, str] | None = None) -> tuple[str, int] | None:
    """A TFJob's rank 0 (its chief, else its master, else worker 0) as ``(host, port)`` from
    ``TF_CONFIG``'s cluster; None without one."""
    env = os.environ if env is None else env
    try:
        cluster = json.loads(env.get("TF_CONFIG") or "{}").get("cluster") or {}
        head = next(cluster[name][0] for name in TF_ORDER if cluster.get(name))
        host, port = str(head).rsplit(":", 1)
        return host, int(port)
    except (ValueError, KeyError, TypeError, AttributeError, StopIteration, IndexError):
        return None


def _tf_rank(raw: str) -> int | None:
    try:
        config = json.loads(raw)
        task, cluster = config["task"], config.get("cluster") or {}
        kind, index = str(task["type"]).lower(), int(task["index"])
    except (ValueError, KeyError, TypeError):
        return None
    rank = 0
    for name in TF_ORDER:
        if name == kind:
            return rank + index
        rank += len(cluster.get(name) or ())
    return None  # an evaluator: not a training rank


def node_index(env: Mapping[str, str] | None = None) -> int:
    """The node (replica) this process runs on: mpirun's slot block, torchrun's node rank
    (``PET_NODE_RANK``, ``GROUP_RANK``), else the replica's own rank (a PyTorchJob's or an
    XGBoostJob's ``RANK``, a TFJob's task: one process per replica there), else 0."""
    env = os.environ if env is None else env
    under_mpirun = mpi.node_index(env)
    if under_mpirun is not None:
        return under_mpirun
    for key in ("PET_NODE_RANK", "GROUP_RANK"):
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    rank = global_rank(env)
    return rank if rank is not None else 0


def node_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``CROSS_RANK``/``CROSS_SIZE`` (this node, the number of nodes), as DeepSpeed's own
    launcher sets them and its decoupled checkpoint writer reads them; empty when the
    launcher did not say how many ranks a node has."""
    env = os.environ if env is None else env
    world, local = env.get("WORLD_SIZE", ""), env.get("LOCAL_WORLD_SIZE", "")
    if not (world.isdigit() and local.isdigit() and int(local) > 0):
        return {}
    return {"CROSS_RANK": str(node_index(env)), "CROSS_SIZE": str(max(1, int(world) // int(local)))}
