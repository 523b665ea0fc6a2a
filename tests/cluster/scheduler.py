"""A scheduler: binds pending pods to configured nodes with room for their requests.

Fit checks, as the default scheduler's: nodeSelector labels, every requested resource
(cpu, memory, ``nvidia.com/gpu``, ``rdma/...``) against allocatable minus what bound,
unfinished pods request, and PersistentVolumeClaims that exist. An unschedulable pod stays
Pending with condition PodScheduled=False (Unschedulable) and a FailedScheduling event; it is
retried every second (so configuring a node later lets it run).
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from typing import Any

from .store import Store, emit_event, now

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "m": 1e-3,
}


def quantity(value: Any) -> float:
    m = re.match(r"^([0-9.]+)([A-Za-z]*)$", str(value))
    if not m:
        return 0.0
    return float(m[1]) * _SUFFIX.get(m[2], 1)


def requests(pod: dict[str, Any]) -> Counter[str]:
    total: Counter[str] = Counter()
    for c in pod.get("spec", {}).get("containers", []):
        res = c.get("resources") or {}
        want = dict(res.get("limits") or {})
        want.update(res.get("requests") or {})
        for k, v in want.items():
            total[k] += quantity(v)
    return total


class Scheduler(threading.Thread):
    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True, name="scheduler")
        self.store = store
        self.pods = store.registry.by_plural("pods")
        self.nodes = store.registry.by_plural("nodes")
        self.pvcs = store.registry.by_plural("persistentvolumeclaims")
        self._events = store.subscribe()
        self._stop = threading.Event()
        self._reported: dict[str, str] = {}

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            self.schedule_all()
            try:
                self._events.get(timeout=1.0)
                while not self._events.empty():
                    self._events.get_nowait()
            except Exception:
                pass

    def schedule_all(self) -> None:
        pods, _ = self.store.list(self.pods, None)
        for pod in pods:
            if (
                not pod["spec"].get("nodeName")
                and pod.get("status", {}).get("phase", "Pending") == "Pending"
            ):
                self._schedule(pod, pods)

    def _schedule(self, pod: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        nodes, _ = self.store.list(self.nodes, None)
        missing = self._missing_claim(pod)
        reasons: Counter[str] = Counter()
        chosen = None
        if missing:
            msg = (
                f'0/{len(nodes)} nodes are available: persistentvolumeclaim "{missing}" not found.'
            )
        else:
            for node in nodes:
                why = self._misfit(pod, node, pods)
                if not why:
                    chosen = node
                    break
                reasons.update(why)
            parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
            msg = (
                f"0/{len(nodes)} nodes are available: {parts}. preemption: 0/{len(nodes)} nodes "
                f"are available: {len(nodes)} No preemption victims found for incoming pod."
            )
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        if chosen is not None:
            node_name = chosen["metadata"]["name"]

            def bind(p: dict[str, Any]) -> None:
                p["spec"]["nodeName"] = node_name
                conds = [
                    c
                    for c in p.get("status", {}).get("conditions") or []
                    if c["type"] != "PodScheduled"
                ]
                conds.append(
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now(),
                    }
                )
                p.setdefault("status", {})["conditions"] = conds

            bound = self.store.mutate(self.pods, ns, name, bind)
            if bound is not None:
                emit_event(
                    self.store,
                    bound,
                    "Scheduled",
                    f"Successfully assigned {ns}/{name} to {node_name}",
                    component="default-scheduler",
                )
            return
        uid = pod["metadata"]["uid"]
        if self._reported.get(uid) == msg:
            return
        self._reported[uid] = msg

        def unschedulable(p: dict[str, Any]) -> None:
            p.setdefault("status", {})["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now(),
                    "reason": "Unschedulable",
                    "message": msg,
                }
            ]

        self.store.mutate(self.pods, ns, name, unschedulable, "status")
        emit_event(self.store, pod, "FailedScheduling", msg, "Warning", "default-scheduler")

    def _missing_claim(self, pod: dict[str, Any]) -> str:
        ns = pod["metadata"]["namespace"]
        for vol in pod["spec"].get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and self.store.try_get(self.pvcs, ns, claim) is None:
                return str(claim)
        return ""

    def _misfit(
        self, pod: dict[str, Any], node: dict[str, Any], pods: list[dict[str, Any]]
    ) -> list[str]:
        labels = node["metadata"].get("labels") or {}
        selector = pod["spec"].get("nodeSelector") or {}
        if any(labels.get(k) != v for k, v in selector.items()):
            return ["node(s) didn't match Pod's node affinity/selector"]
        name = node["metadata"]["name"]
        used: Counter[str] = Counter()
        for other in pods:
            if other["spec"].get("nodeName") == name and other.get("status", {}).get(
                "phase"
            ) not in (
                "Succeeded",
                "Failed",
            ):
                used.update(requests(other))
        alloc = node.get("status", {}).get("allocatable") or {}
        out = []
        for res, amount in sorted(requests(pod).items()):
            if amount and quantity(alloc.get(res, 0)) - used[res] < amount:
                out.append(f"Insufficient {res}")
        return out
