"""Finding a job of this tool in the cluster context's namespace: its objects by label (every
kind), its kind, its watch (opened on the first read, opened anew once it stopped idle).

This module owns two registries of the cluster context: ``kinds`` and ``watches`` are written
here only (the other parts call :func:`remember_kind`, :func:`forget_kind`, :func:`watch`,
:func:`stop_watch` and :func:`close`)."""

from __future__ import annotations

from typing import Any

from ...errors import JobNotFound
from ...kinds import KIND_TABLE
from .client.resources import job_resource
from .client.retries import Forbidden
from .cluster import Cluster
from .labels import JOB_LABEL
from .status.watch import JobWatch

__all__ = [
    "close",
    "forget_kind",
    "job_object",
    "job_objects",
    "kind_of",
    "remember_kind",
    "stop_watch",
    "watch",
]


def job_objects(cluster: Cluster, selector: str, name: str = "") -> list[dict[str, Any]]:
    """The jobs of every kind matching ``selector``; a kind not served (404) or not
    readable (403: a Kubeflow profile may not read RayJobs) is skipped, but a namespace
    where no kind may be read is one ``forbidden`` error (looking up job ``name``)."""
    out: list[dict[str, Any]] = []
    denied: list[str] = []
    readable = False
    for kind, info in KIND_TABLE.items():
        resource = job_resource(info)
        path = resource.path(cluster.namespace)
        try:
            found = cluster.api.find(path, {"labelSelector": selector})
        except Forbidden:
            denied.append(resource.qualified)
            continue
        if found is None:  # the kind is not served
            continue
        readable = True
        items = list(found.get("items") or [])
        for item in items:
            item.setdefault("kind", kind)
        out += items
    if denied and not readable:
        why = f" (to find job {name!r}; cancel and delete need delete too)" if name else ""
        raise cluster.forbidden(f"list {_some(denied)}{why}")
    return out


def remember_kind(cluster: Cluster, name: str, kind: str) -> None:
    """Job ``name`` is of ``kind`` (it was created, or a run ordered on it)."""
    cluster.kinds[name] = kind


def forget_kind(cluster: Cluster, name: str) -> None:
    """Job ``name`` is gone: its kind is looked up anew if a job of that name comes back."""
    cluster.kinds.pop(name, None)


def kind_of(cluster: Cluster, name: str) -> str:
    """The kind of job ``name``: as created, else as found by its label."""
    if name not in cluster.kinds:
        for job in job_objects(cluster, f"{JOB_LABEL}={name}", name):
            if job["metadata"]["name"] == name:
                cluster.kinds[name] = job["kind"]
        if name not in cluster.kinds:
            raise JobNotFound(
                f"No ktrain job named {name!r} in namespace {cluster.namespace!r}. "
                "`%ktrain list --backend kubernetes` shows the jobs there."
            )
    return cluster.kinds[name]


def watch(cluster: Cluster, name: str) -> JobWatch:
    """The watch of job ``name``, synced (JobNotFound when no such job)."""
    found = cluster.watches.get(name)
    if found is not None and not found.running:  # stopped, idle: watch it anew
        found.stop()
        found = None
    if found is None:
        resource = job_resource(KIND_TABLE[kind_of(cluster, name)])
        found = JobWatch(cluster.api, cluster.namespace, resource, name).start()
        cluster.watches[name] = found
    found.wait_synced()
    return found


def stop_watch(cluster: Cluster, name: str) -> None:
    found = cluster.watches.pop(name, None)
    if found is not None:
        found.stop()


def close(cluster: Cluster) -> None:
    """End the job watches and close the connection the context opened (a later read of a job
    watches it anew)."""
    for found in list(cluster.watches.values()):
        found.stop()
    cluster.watches.clear()
    cluster.close()


def job_object(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The job as its watch holds it now; None once it is gone (its history stays)."""
    try:
        return watch(cluster, name).job
    except JobNotFound:
        return None


def _some(names: list[str], shown: int = 3) -> str:
    """``a, b, c and 4 more``."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
