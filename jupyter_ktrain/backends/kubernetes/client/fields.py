"""Typed reads of the fields the backend's parts share, from objects as the API server sends
them (JSON): an object's name, uid, labels and annotations, its status conditions, a pod's
phase and its containers' statuses. Each read tolerates a missing or null field (the server
omits empty ones) and never changes the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Condition",
    "ContainerStatus",
    "Terminated",
    "annotations_of",
    "conditions",
    "container_statuses",
    "labels_of",
    "name_of",
    "pod_phase",
    "restarts",
    "uid_of",
]

Obj = Mapping[str, Any]


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def name_of(obj: Obj) -> str:
    return str(_meta(obj).get("name") or "")


def uid_of(obj: Obj) -> str:
    return str(_meta(obj).get("uid") or "")


def labels_of(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


@dataclass(frozen=True)
class Condition:
    """One of ``status.conditions``."""

    type: str
    status: str  # "True", "False", "Unknown"
    reason: str = ""
    message: str = ""

    @property
    def true(self) -> bool:
        return self.status == "True"


def conditions(obj: Obj) -> tuple[Condition, ...]:
    """The object's ``status.conditions``, in the order the server lists them."""
    raw = (obj.get("status") or {}).get("conditions") or []
    return tuple(
        Condition(
            str(c.get("type") or ""),
            str(c.get("status") or ""),
            str(c.get("reason") or ""),
            str(c.get("message") or ""),
        )
        for c in raw
        if isinstance(c, Mapping)
    )


@dataclass(frozen=True)
class Terminated:
    """How a container ended (``state.terminated`` or ``lastState.terminated``)."""

    exit_code: int | None
    reason: str = ""
    finished_at: str = ""

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> Terminated | None:
        if not raw:
            return None
        code = raw.get("exitCode")
        return cls(
            int(code) if code is not None else None,
            str(raw.get("reason") or ""),
            str(raw.get("finishedAt") or ""),
        )


@dataclass(frozen=True)
class ContainerStatus:
    """One of a pod's ``status.containerStatuses``."""

    name: str
    restart_count: int
    state: Mapping[str, Any]  # {"running": ...} | {"waiting": ...} | {"terminated": ...}
    last_state: Mapping[str, Any]

    @property
    def previous(self) -> Terminated | None:
        """How its previous run ended (a restart in place)."""
        return Terminated.of(self.last_state.get("terminated"))

    @property
    def terminated(self) -> Terminated | None:
        """How it ended: this run, else the previous one."""
        return Terminated.of(self.state.get("terminated")) or self.previous


def container_statuses(pod: Obj) -> tuple[ContainerStatus, ...]:
    """The pod's containers' statuses, in the pod's order (none before it is scheduled)."""
    raw = (pod.get("status") or {}).get("containerStatuses") or []
    return tuple(
        ContainerStatus(
            str(cs.get("name") or ""),
            int(cs.get("restartCount") or 0),
            cs.get("state") or {},
            cs.get("lastState") or {},
        )
        for cs in raw
    )


def restarts(pod: Obj) -> int:
    """How often the pod's containers restarted in place, together."""
    return sum(cs.restart_count for cs in container_statuses(pod))


def pod_phase(pod: Obj, default: str = "") -> str:
    """The pod's ``status.phase`` (``Pending``, ``Running``, ``Succeeded``, ``Failed``)."""
    return str((pod.get("status") or {}).get("phase") or default)
