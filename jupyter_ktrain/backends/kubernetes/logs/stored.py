"""The stored lines of a job's pods, as the kubelet keeps them (``pods/log``): each pod's
previous container's, then its current one's; a pod already deleted (the job failed:
cleanPodPolicy) gives what a follow kept of it (:class:`~.logs.FollowedLines`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ....kinds import job_kind
from ..client.fields import restarts
from ..client.resources import POD
from ..cluster import Cluster
from ..status.derive import replica_pods
from .pod import FollowedLines

__all__ = ["log_request", "stored_logs"]


def stored_logs(
    cluster: Cluster,
    job: Mapping[str, Any],
    pods: Mapping[str, Any],
    stamped: bool = False,
) -> Iterator[tuple[str, str]]:
    """(pod, line) for every stored line of ``job``'s pods (``pods``: as its watch holds
    them), pod by pod; with the kubelet's timestamps when ``stamped``."""
    kept = FollowedLines.of_job(job)
    for pod in replica_pods(job) or sorted({*pods, *kept.pods()}):
        obj = pods.get(pod)
        if obj is None:  # deleted (the job failed: cleanPodPolicy): what a follow read
            yield from ((pod, line) for line in kept.lines(pod, stamped))
            continue
        path, query = log_request(cluster, job, pod)
        if stamped:
            query["timestamps"] = True
        passes = [{**query, "previous": True}] if restarts(obj) else []
        for q in [*passes, query]:
            for raw in cluster.api.logs(path, q, partial=True):
                yield pod, raw.decode("utf-8", "replace")


def log_request(cluster: Cluster, job: Mapping[str, Any], pod: str) -> tuple[str, dict[str, Any]]:
    """Path and base query of one of the job's pods' logs (its training container)."""
    kind = job_kind(job.get("kind", ""))
    container = kind.container if kind else ""
    path = POD.path(cluster.namespace, pod) + "/log"
    return path, ({"container": container} if container else {})
