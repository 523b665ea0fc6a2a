"""Whether ``--topology LEVEL`` can apply, read from the cluster before anything is created:
the job's LocalQueue names a ClusterQueue, whose ResourceFlavors name a Kueue ``Topology``
(``spec.topologyName``), whose levels are node labels. ``LEVEL`` is one of those labels, or its
last part (``rack`` for ``example.com/rack``); the job's annotation gets the full label.

What the user may not read (a notebook user often may not read cluster-scoped objects) is not
held against the job: the level is kept as written, and a note says it was not checked.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ....errors import PreflightError, SpecError
from ....spec.job import JobSpec
from ..client.resources import LOCAL_QUEUE, Resource
from ..client.retries import Forbidden, Unauthorized

__all__ = ["CLUSTER_QUEUE", "RESOURCE_FLAVOR", "TOPOLOGY", "check_topology"]

CLUSTER_QUEUE = Resource("ClusterQueue", "kueue.x-k8s.io", "v1beta2", "clusterqueues")
RESOURCE_FLAVOR = Resource("ResourceFlavor", "kueue.x-k8s.io", "v1beta2", "resourceflavors")
TOPOLOGY = Resource("Topology", "kueue.x-k8s.io", "v1beta2", "topologies")


class _Unreadable(Exception):
    """The user may not read (or the cluster does not serve) what the check needs."""


def _get(api: Any, path: str) -> dict[str, Any] | None:
    """The object, None when it does not exist; :class:`_Unreadable` when it may not be read."""
    try:
        found = api.find(path)
    except (Unauthorized, Forbidden):
        raise _Unreadable(path) from None
    return None if found is None else dict(found)


def _match(level: str, labels: list[str]) -> str | None:
    if level in labels:
        return level
    short = [lab for lab in labels if lab.rsplit("/", 1)[-1] == level]
    return short[0] if len(short) == 1 else None


def check_topology(api: Any, spec: JobSpec) -> tuple[JobSpec, tuple[str, ...]]:
    """``spec`` with its topology level as the node label Kueue knows, and notes; raises one
    line (:class:`~jupyter_ktrain.errors.SpecError` for the flags, else
    :class:`~jupyter_ktrain.errors.PreflightError`) where the placement cannot apply."""
    s = spec.scheduling
    placement = s.placement
    if placement is None:
        return spec, ()
    flag, level = placement
    if not s.kueue_queue:
        raise SpecError(
            f"{flag} {level}: Kueue places the job by topology, so it needs a Kueue queue: add "
            f"--kueue-queue QUEUE (or `%ktrain config kueue_queue=QUEUE`), or drop {flag}."
        )
    queue = s.kueue_queue
    if api is None:  # no cluster to read (a dry run without one): kept as written
        return spec, ()
    unchecked = (f"{flag} {level} not checked against the queue's Topology (not readable here)",)
    try:
        lq = _get(api, LOCAL_QUEUE.path(spec.namespace or "default", queue))
        if lq is None:  # the queue check (preflight) says so, with the queues there
            return spec, ()
        cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
        cq = _get(api, CLUSTER_QUEUE.path(name=cq_name)) or {}
        flavors = [
            str(f["name"])
            for group in (cq.get("spec") or {}).get("resourceGroups") or []
            for f in group.get("flavors") or []
        ]
        topologies: dict[str, tuple[str, list[str]]] = {}  # flavor -> (topology, levels)
        for name in flavors:
            rf = _get(api, RESOURCE_FLAVOR.path(name=name)) or {}
            topo = str((rf.get("spec") or {}).get("topologyName") or "")
            if not topo:
                continue
            obj = _get(api, TOPOLOGY.path(name=topo)) or {}
            levels = [str(x.get("nodeLabel")) for x in (obj.get("spec") or {}).get("levels") or []]
            topologies[name] = (topo, levels)
    except _Unreadable:
        return spec, unchecked
    where = f"LocalQueue {queue!r} (ClusterQueue {cq_name!r})"
    if not topologies:
        named = ", ".join(flavors) or "none"
        raise PreflightError(
            [
                f"{flag} {level}: the ResourceFlavors of {where} ({named}) name no Kueue "
                "Topology, so Kueue cannot place the job by topology: drop "
                f"{flag}, or ask an admin to give a flavor a topologyName (README: Placement)."
            ]
        )
    for _flavor, (_topo, levels) in topologies.items():
        found = _match(level, levels)
        if found:
            if flag == "--topology":
                return spec.evolve(scheduling=replace(s, topology=found)), ()
            return spec.evolve(scheduling=replace(s, topology_preferred=found)), ()
    have = "; ".join(
        f"Topology {topo!r} of flavor {fl!r}: {', '.join(levels) or 'no levels'}"
        for fl, (topo, levels) in topologies.items()
    )
    raise PreflightError(
        [f"{flag} {level}: no level of {where} is {level!r} ({have}): name one of these levels."]
    )
