"""What the local backend hands its supervisor: :class:`LocalRequest`, written to the job
folder's ``plan.json`` (:meth:`LocalRequest.to_json`) and read back by the supervisor, the warm
code and the backend (:func:`read_plan`).

``plan.json`` carries a ``version`` (:data:`PLAN_VERSION`). A folder written before versions
existed reads as version 1 (a plan from before restarts has no ``max_restarts``: never
restarted); one written by a newer jupyter-ktrain is refused with one line that says so (the
job store's rule, :mod:`jupyter_ktrain.store.versions`). Pure apart from :func:`read_plan`'s one
file read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...store.versions import versioned

__all__ = ["PLAN", "PLAN_VERSION", "LocalRequest", "NodeLaunch", "PlanError", "read_plan"]

PLAN = "plan.json"
PLAN_VERSION = 1
OLD_RESTART_DELAY_S = 1.0  # a plan from before restart_delay_s was written waited this long


class PlanError(ValueError):
    """A ``plan.json`` this version cannot read (a newer one's, or not a plan)."""


@dataclass(frozen=True)
class NodeLaunch:
    """One local node: the command, its full environment, and where it runs."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str

    def with_env(self, changes: Mapping[str, str]) -> NodeLaunch:
        """This launch with ``changes`` to the keys its environment already has."""
        env = {k: changes.get(k, v) for k, v in self.env.items()}
        return NodeLaunch(self.argv, env, self.cwd)


@dataclass(frozen=True)
class LocalRequest:
    """What the supervisor gets (``plan.json``): each node's launch, the rendezvous port, the
    marker its processes carry (so a stop finds them all), and the restart policy
    (``max_restarts`` None: a plan from before restarts, never restarted)."""

    master_port: int
    marker: str
    nodes: tuple[NodeLaunch, ...]
    max_restarts: int | None
    restart_delay_s: float = 0.0
    warm: bool = False  # the nodes are warm agents (--warm): they stay for the next run
    reuse: bool = False  # a run on a warm job that already runs: nothing new is started
    replaces: str = ""  # a warm job of this name with another shape, deleted first
    hang_after_s: float | None = None  # --hang-after (None: the watch's own limits)

    @property
    def nproc(self) -> int:
        """Processes per node (torchrun's ``--nproc-per-node``, from the first node's
        environment; 1 where it says none)."""
        try:
            return max(1, int(self.env.get("PET_NPROC_PER_NODE", "1")))
        except ValueError:
            return 1

    @property
    def env(self) -> Mapping[str, str]:
        """The first node's environment ({} in a plan with no nodes)."""
        return self.nodes[0].env if self.nodes else {}

    def with_port(self, port: int) -> LocalRequest:
        """This plan with its rendezvous on ``port`` (a restart's, when another took its own)."""
        changes = {"MASTER_PORT": str(port), "PET_MASTER_PORT": str(port)}
        nodes = tuple(launch.with_env(changes) for launch in self.nodes)
        return replace(self, master_port=port, nodes=nodes)

    @property
    def image_digest(self) -> None:
        """Local nodes run this machine's Python: no image."""
        return None

    def to_json(self) -> dict[str, object]:
        """The supervisor's ``plan.json``."""
        nodes = [{"argv": list(n.argv), "env": dict(n.env), "cwd": n.cwd} for n in self.nodes]
        return {
            "version": PLAN_VERSION,
            "master_port": self.master_port,
            "marker": self.marker,
            "nodes": nodes,
            "max_restarts": self.max_restarts,
            "restart_delay_s": self.restart_delay_s,
            "warm": self.warm,
            "hang_after_s": self.hang_after_s,
        }

    @classmethod
    def from_json(cls, raw: Any) -> LocalRequest:
        """Inverse of :meth:`to_json`, for this version's plans and older ones; PlanError with
        one line for a newer one's or for what is no plan."""
        raw = versioned(raw, "plan.json", "plan", PLAN_VERSION, PlanError)
        try:
            nodes = tuple(
                NodeLaunch(tuple(n["argv"]), dict(n["env"]), str(n["cwd"])) for n in raw["nodes"]
            )
            limit, hang_after = raw.get("max_restarts"), raw.get("hang_after_s")
            return cls(
                master_port=int(raw.get("master_port") or 0),
                marker=str(raw["marker"]),
                nodes=nodes,
                max_restarts=None if limit is None else int(limit),
                restart_delay_s=float(raw.get("restart_delay_s", OLD_RESTART_DELAY_S)),
                warm=bool(raw.get("warm", False)),
                hang_after_s=None if hang_after is None else float(hang_after),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanError(f"plan.json is not a job's plan ({exc!r} missing or wrong)") from exc


def read_plan(job_dir: Path) -> LocalRequest:
    """The job folder's plan; OSError when it has none, PlanError when it cannot be read."""
    try:
        raw = json.loads((job_dir / PLAN).read_text())
    except ValueError as exc:
        raise PlanError(f"plan.json is not JSON ({exc})") from exc
    return LocalRequest.from_json(raw)
