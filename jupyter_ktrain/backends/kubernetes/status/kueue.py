"""What Kueue says of a job, from its Workload. Pure, but for :class:`QueuePositions` (reads).

A job with the ``kueue.x-k8s.io/queue-name`` label is created suspended by Kueue's webhook;
Kueue makes a Workload for it (owned by the job) and unsuspends the job when its ClusterQueue
has quota for every pod set at once. While it waits, the Workload's ``QuotaReserved``
condition is False and its message is Kueue's own reason ("couldn't assign flavors to pod set
worker: insufficient unused quota for cpu in flavor default, 1 more needed"). An admitted job
can be evicted (``Evicted``: preempted by a higher-priority workload, pods not ready within
``waitForPodsReady.timeout``, its queue stopped): Kueue suspends it again, deletes its pods and
requeues it, counting each eviction in ``status.schedulingStats.evictions``. Such a job is
queued again, not failed. The position in the queue comes from Kueue's visibility API
(``pendingworkloads`` of the LocalQueue), when the cluster serves it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ....errors import ClusterError
from ....jobs import Eviction
from ..client.fields import Condition, conditions, labels_of
from ..client.resources import PENDING_WORKLOADS, WORKLOAD
from ..client.retries import Forbidden

__all__ = [
    "QUEUE_LABEL",
    "QueueInfo",
    "owner_of",
    "pending_position",
    "queue_info",
    "queued_message",
]

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# the object ids Kueue puts in an eviction message ("... (UID: u, JobUID: j) ...")
_DETAIL = re.compile(r"\s*\(UID: [^)]*\)")
# why Kueue evicted a workload (Evicted condition reasons), as a user reads them
_EVICTED = {
    "Preempted": "preempted to make room for a higher-priority workload",
    "PodsReadyTimeout": "its pods were not all ready within Kueue's waitForPodsReady timeout",
    "AdmissionCheck": "an admission check was rejected or retried",
    "ClusterQueueStopped": "its ClusterQueue was stopped",
    "LocalQueueStopped": "its LocalQueue was stopped",
    "NodeFailures": "a node it ran on failed",
    "Deactivated": "it was deactivated",
}


@dataclass(frozen=True)
class QueueInfo:
    """A job's place in Kueue. ``admitted``: quota reserved and every admission check passed
    (the job runs or may run); ``reason``/``message``: Kueue's own words for why it waits (or
    was evicted, when ``evicted``); ``position``: its place in the LocalQueue (0 = next)."""

    queue: str
    cluster_queue: str = ""
    admitted: bool = False
    finished: bool = False
    evicted: bool = False
    reason: str = ""
    message: str = ""
    evictions: tuple[Eviction, ...] = ()
    position: int | None = None


def owner_of(workload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The controller reference of ``workload`` (the job Kueue made it for: ``kind``, ``name``,
    ``uid``), or {}."""
    refs = (workload.get("metadata") or {}).get("ownerReferences") or []
    return next((ref for ref in refs if ref.get("controller")), {})


def _conditions(workload: Mapping[str, Any]) -> dict[str, Condition]:
    return {c.type: c for c in conditions(workload)}


def queue_info(workload: Mapping[str, Any], position: int | None = None) -> QueueInfo:
    """The :class:`QueueInfo` of one Workload object (``kueue.x-k8s.io/v1beta2``)."""
    spec, status = workload.get("spec") or {}, workload.get("status") or {}
    conds = _conditions(workload)

    def true(kind: str) -> bool:
        found = conds.get(kind)
        return found is not None and found.true

    admission = status.get("admission") or {}
    evictions = tuple(
        Eviction(str(e.get("reason", "")), _EVICTED.get(str(e.get("reason")), ""), int(e["count"]))
        for e in ((status.get("schedulingStats") or {}).get("evictions") or [])
        if isinstance(e, Mapping) and isinstance(e.get("count"), int)
    )
    evicted = true("Evicted")
    if evicted:
        cond = conds["Evicted"]
    elif true("QuotaReserved"):
        cond = conds.get("Admitted") or conds["QuotaReserved"]
    else:
        cond = conds.get("QuotaReserved") or Condition("", "")
    return QueueInfo(
        queue=str(spec.get("queueName", "")),
        cluster_queue=str(admission.get("clusterQueue", "")),
        admitted=true("Admitted") and not evicted,
        finished=true("Finished"),
        evicted=evicted,
        reason=cond.reason,
        message=cond.message,
        evictions=evictions,
        position=position,
    )


def queued_message(info: QueueInfo) -> tuple[str, str]:
    """(reason, message) the cell and the panel show while the job waits in its queue."""
    where = f"in LocalQueue {info.queue!r}"
    place = "" if info.position is None else f"; position {info.position + 1} in the queue"
    if info.evicted:
        why = _EVICTED.get(info.reason) or info.reason or "evicted"
        told = _DETAIL.sub("", info.message).split("; preemptor path")[0].strip()
        said = f" ({told})" if told else ""
        return "Evicted", f"evicted by Kueue: {why}{said}; requeued {where}{place}"
    said = info.message or "waiting for quota"
    return "Queued", f"waiting {where}: {said}{place}"


def pending_position(items: Sequence[Mapping[str, Any]], workload: Mapping[str, Any]) -> int | None:
    """The workload's position in a visibility ``pendingworkloads`` answer
    (``positionInLocalQueue``), or None when it is not listed."""
    name = (workload.get("metadata") or {}).get("name")
    for item in items:
        if (item.get("metadata") or {}).get("name") == name:
            pos = item.get("positionInLocalQueue")
            return int(pos) if isinstance(pos, int) else None
    return None


class QueuePositions:
    """The edge: reads a queued job's position from Kueue's visibility API (at most every
    ``every_s`` per Workload), and the namespace's Workloads for lists. A cluster that does not
    serve the visibility API (an older Kueue, the API not registered, no RBAC for it) is asked
    once; positions are then left out. An API that is not available yet is asked again."""

    def __init__(self, every_s: float = 3.0) -> None:
        self.every_s = every_s
        self.served: bool | None = None
        self._last: dict[str, tuple[float, int | None]] = {}

    def position(self, api: Any, namespace: str, workload: Mapping[str, Any] | None) -> int | None:
        if not workload or self.served is False:
            return None
        info = queue_info(workload)
        if info.admitted or info.finished or not info.queue:
            return None
        name = str(workload["metadata"]["name"])
        when, pos = self._last.get(name, (0.0, None))
        if time.monotonic() - when < self.every_s:
            return pos
        path = PENDING_WORKLOADS.path(namespace)
        try:
            got = api.find(f"{path}/{info.queue}/pendingworkloads")
        except ClusterError as exc:
            # not allowed (403): not asked again; anything else (503 while the aggregated API
            # comes up) is asked again after every_s
            if isinstance(exc, Forbidden):
                self.served = False
            self._last[name] = (time.monotonic(), pos)
            return pos
        if got is None:  # not served (404): not asked again
            self.served = False
            self._last[name] = (time.monotonic(), pos)
            return pos
        self.served = True
        pos = pending_position(got.get("items") or [], workload)
        self._last[name] = (time.monotonic(), pos)
        return pos

    def workloads(
        self, api: Any, namespace: str, jobs: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """The namespace's Workloads, read only when one of ``jobs`` went to a queue."""
        if not any(QUEUE_LABEL in labels_of(j) for j in jobs):
            return []
        try:
            found: list[dict[str, Any]] = api.items(WORKLOAD.path(namespace))
        except ClusterError:
            return []
        return found
