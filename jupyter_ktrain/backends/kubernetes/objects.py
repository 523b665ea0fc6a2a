"""Creating and deleting a job's objects in the cluster context's namespace: the job and what
is made beside it (:data:`~.resources.OWNED`), which the job then owns (deleted with it)."""

from __future__ import annotations

from typing import Any

from ...errors import ClusterError
from ...kinds import KIND_TABLE
from .client.resources import OWNED, job_resource, resource_of
from .client.retries import Forbidden
from .cluster import Cluster
from .plans.plan import Manifest, kind_and_name

__all__ = ["create", "delete_job", "delete_one", "own"]


def create(cluster: Cluster, obj: Manifest, ns: str) -> dict[str, Any]:
    """Create ``obj`` in ``ns``; the object as created."""
    path = resource_of(kind_and_name(obj)[0]).path(ns)
    created: dict[str, Any] = cluster.api.create(path, obj)
    return created


def own(cluster: Cluster, job: dict[str, Any], created: list[tuple[str, str]], ns: str) -> None:
    """Make ``job`` the owner of the objects ``created`` (kind, name) beside it; if one
    cannot be changed, the job is deleted and the error raised."""
    ref = {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "blockOwnerDeletion": False,
    }
    for kind, name in created:
        path = OWNED[kind].path(ns, name)
        body = {"metadata": {"ownerReferences": [ref]}}
        try:
            cluster.api.patch(path, body)
        except ClusterError:
            delete_job(cluster, job["kind"], job["metadata"]["name"], ns)
            raise


def delete_job(cluster: Cluster, kind: str, name: str, ns: str) -> None:
    """Delete job ``name`` (its pods go in the background); gone already is no error, RBAC
    refusing it is the one ``forbidden`` line."""
    resource = job_resource(KIND_TABLE[kind])
    path = resource.path(ns, name)
    try:
        cluster.api.delete(path, {"propagationPolicy": "Background"})
    except Forbidden:
        what = f"delete {resource.qualified} ({kind} {name!r} is left as it is)"
        raise cluster.forbidden(what) from None


def delete_one(cluster: Cluster, kind: str, name: str, ns: str) -> None:
    """Delete one object made beside a job; gone already is no error."""
    cluster.api.delete(OWNED[kind].path(ns, name))
