"""``meta.k8s.io/v1`` Table responses, which ``kubectl get`` asks for."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from typing import Any

from .resources import Resource

NAME_COL = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}
AGE_COL = {
    "name": "Age",
    "type": "date",
    "format": "",
    "description": "CreationTimestamp is a timestamp representing the server time when this "
    "object was created.",
    "priority": 0,
}


def jsonpath(obj: Any, path: str) -> Any:
    """The subset of JSONPath that printer columns use: ``.a.b[0].c``, ``[-1:]``."""
    cur = obj
    for name, index in re.findall(r"\.([^.\[]+)|\[([^\]]*)\]", path):
        if name:
            cur = cur.get(name) if isinstance(cur, dict) else None
        elif isinstance(cur, list):
            if ":" in index:
                a, _, b = index.partition(":")
                sl = cur[int(a) if a else None : int(b) if b else None]
                cur = sl[0] if len(sl) == 1 else sl or None
            else:
                i = int(index)
                cur = cur[i] if -len(cur) <= i < len(cur) else None
        else:
            cur = None
        if cur is None:
            return None
    return cur


def _pod_cells(pod: dict[str, Any]) -> list[Any]:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    total = len(pod.get("spec", {}).get("containers", []))
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(s.get("restartCount", 0) for s in statuses)
    phase = pod.get("status", {}).get("phase", "Pending")
    reason = phase
    for s in statuses:
        state = s.get("state", {})
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and phase not in ("Succeeded",):
            reason = state["terminated"].get("reason") or reason
    if phase in ("Succeeded",):
        reason = "Completed"
    if pod["metadata"].get("deletionTimestamp"):
        reason = "Terminating"
    return [
        f"{ready}/{total}",
        reason,
        restarts,
        pod["metadata"].get("creationTimestamp"),
        pod.get("status", {}).get("podIP") or "<none>",
        pod.get("spec", {}).get("nodeName") or "<none>",
    ]


POD_COLS = [
    {"name": "Ready", "type": "string", "format": "", "description": "ready", "priority": 0},
    {"name": "Status", "type": "string", "format": "", "description": "status", "priority": 0},
    {"name": "Restarts", "type": "string", "format": "", "description": "restarts", "priority": 0},
    AGE_COL,
    {"name": "IP", "type": "string", "format": "", "description": "pod IP", "priority": 1},
    {"name": "Node", "type": "string", "format": "", "description": "node", "priority": 1},
]


def columns(res: Resource) -> list[dict[str, Any]]:
    if res.plural == "pods":
        return [NAME_COL, *POD_COLS]
    if res.columns:
        cols = [
            {
                "name": c["name"],
                "type": c.get("type", "string"),
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": c.get("priority", 0),
            }
            for c in res.columns
        ]
        return [NAME_COL, *cols]
    return [NAME_COL, AGE_COL]


def cells(res: Resource, obj: dict[str, Any]) -> list[Any]:
    name = obj["metadata"]["name"]
    if res.plural == "pods":
        return [name, *_pod_cells(obj)]
    if res.columns:
        return [name, *(jsonpath(obj, c["jsonPath"]) for c in res.columns)]
    return [name, obj["metadata"].get("creationTimestamp")]


def human_age(ts: Any) -> Any:
    """The server renders ``date`` cells as kubectl shows them (``5m``, ``3h``, ``2d``)."""
    if not isinstance(ts, str):
        return ts
    try:
        t = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return ts
    secs = max(0, int(time.time() - t.timestamp()))
    if secs < 120:
        return f"{secs}s"
    if secs < 600:
        return f"{secs // 60}m{secs % 60}s" if secs % 60 else f"{secs // 60}m"
    if secs < 3 * 3600:
        return f"{secs // 60}m"
    if secs < 48 * 3600:
        return f"{secs // 3600}h"
    return f"{secs // 86400}d"


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    }


def table(
    res: Resource,
    items: list[dict[str, Any]],
    rv: str,
    include: str = "Metadata",
    with_columns: bool = True,
) -> dict[str, Any]:
    rows = []
    for obj in items:
        cols = columns(res)
        row: dict[str, Any] = {
            "cells": [
                human_age(v) if c["type"] == "date" else v
                for c, v in zip(cols, cells(res, obj), strict=False)
            ]
        }
        ro = _row_object(obj, include)
        if ro is not None:
            row["object"] = ro
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": columns(res) if with_columns else [],
        "rows": rows,
    }
