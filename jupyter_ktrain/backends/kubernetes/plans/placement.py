"""Topology-aware placement through Kueue (TAS): what the job asks, and where Kueue put it.

``--topology LEVEL`` (``--topology-preferred LEVEL``) becomes Kueue's pod-set annotation
``kueue.x-k8s.io/podset-required-topology`` (``...-preferred-topology``) on the pod template of
every replica type that takes part in the collective: Kueue then admits the job only into one
domain of that level (a rack, a block) with room for all of its pods, and pins each pod to the
nodes of its domain. Kueue places each pod set on its own; a head and its workers (a
PyTorchJob's Master and Workers, a RayJob's head and worker group) are two pod sets, so both
also get ``kueue.x-k8s.io/podset-group-name``: Kueue then fits the pair into one domain
together (it groups exactly two pod sets, one of them of one pod).

Where the job landed is the admitted Workload's ``status.admission.podSetAssignments[].
topologyAssignment`` (``kueue.x-k8s.io/v1beta2``: levels, and slices of domains with their
values per level and pod counts): :func:`assigned_domains` reads it as (domain, pods) pairs.

Pure; the cluster reads that check a level against the queue's Topology are in
:mod:`.topology_check`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ....spec.job import JobSpec

__all__ = [
    "GROUP_ANNOTATION",
    "GROUP_NAME",
    "PREFERRED_ANNOTATION",
    "REQUIRED_ANNOTATION",
    "assigned_domains",
    "describe_domains",
    "group_pod_sets",
    "topology_annotations",
]

REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
GROUP_NAME = "collective"  # the one group of a job: its head and its workers


def topology_annotations(spec: JobSpec) -> dict[str, str]:
    """The pod-template annotation that asks Kueue for ``spec``'s placement, or {}."""
    s = spec.scheduling
    if s.topology:
        return {REQUIRED_ANNOTATION: s.topology}
    if s.topology_preferred:
        return {PREFERRED_ANNOTATION: s.topology_preferred}
    return {}


def group_pod_sets(templates: Iterable[dict[str, Any]]) -> None:
    """Put a head's and its workers' pod templates in one Kueue pod-set group (in place),
    where exactly two of them ask for a topology (Kueue groups two pod sets, no more)."""
    asking = [
        t
        for t in templates
        if {REQUIRED_ANNOTATION, PREFERRED_ANNOTATION}
        & set((t.get("metadata") or {}).get("annotations") or {})
    ]
    if len(asking) == 2:
        for t in asking:
            t["metadata"]["annotations"][GROUP_ANNOTATION] = GROUP_NAME


def _level_values(level: Mapping[str, Any], count: int) -> list[str]:
    if level.get("universal") is not None:
        return [str(level["universal"])] * count
    ind = level.get("individual") or {}
    prefix, suffix = ind.get("prefix") or "", ind.get("suffix") or ""
    return [f"{prefix}{root}{suffix}" for root in ind.get("roots") or []]


def assigned_domains(workload: Mapping[str, Any]) -> list[tuple[str, dict[str, str], int]]:
    """(pod set, {level: value}, pods) for every domain Kueue assigned to the admitted
    ``workload``'s pod sets, in Kueue's order; [] when it has no topology assignment."""
    admission = (workload.get("status") or {}).get("admission") or {}
    out: list[tuple[str, dict[str, str], int]] = []
    for psa in admission.get("podSetAssignments") or []:
        ta = psa.get("topologyAssignment") or {}
        levels = [str(x) for x in ta.get("levels") or []]
        for sl in ta.get("slices") or []:
            count = int(sl.get("domainCount") or 0)
            per_level = [_level_values(v, count) for v in sl.get("valuesPerLevel") or []]
            pods = sl.get("podCounts") or {}
            counts = (
                [int(pods["universal"])] * count
                if pods.get("universal") is not None
                else [int(c) for c in pods.get("individual") or []]
            )
            for i in range(count):
                values = {
                    lvl: vals[i]
                    for lvl, vals in zip(levels, per_level, strict=False)
                    if i < len(vals)
                }
                out.append((str(psa.get("name", "")), values, counts[i] if i < len(counts) else 0))
    return out


def _short(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def describe_domains(domains: list[tuple[str, dict[str, str], int]]) -> str:
    """One line: where each pod set's pods went, e.g. ``master: 1 pod on rack=r1 host=n1;
    worker: 1 pod on rack=r1 host=n2``; "" when there is nothing to say."""
    parts = []
    for pod_set, values, pods in domains:
        where = " ".join(f"{_short(k)}={v}" for k, v in values.items())
        parts.append(f"{pod_set}: {pods} pod{'s' if pods != 1 else ''} on {where}")
    return "; ".join(parts)
