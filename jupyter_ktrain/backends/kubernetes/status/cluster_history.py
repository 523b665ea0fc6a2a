"""A cluster job's history (:mod:`..history`): kept when it is seen ended, read once it is gone.

Whoever asks a job's status first after its end (the kernel's follow loop, ``%ktrain status``,
the panel's server, a list) keeps it: every pod's stored log is copied into the job store
(the lines a follow kept already are not written twice) and the final
:class:`~..base.JobStatus` is written, once per job object (its uid). A job deleted by
``%ktrain cancel``/``delete`` before it ended is kept as it was, Cancelled. When the objects
are gone, ``status``, ``shape``, ``list_jobs`` and ``read_logs`` answer from here; a new job
of the name replaces it.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ....errors import ClusterError, JobNotFound
from ....jobs import CANCELLED, JobStatus
from ....store.history import KeptJob, forget_state, keep, kept, kept_names, prune_logs
from ....store.versions import StoreVersionError
from ..cluster import Cluster
from ..logs.pod import FollowedLines, split_stamped
from ..logs.stored import stored_logs
from .derive import NOT_CREATED, job_shape

__all__ = ["ClusterHistory", "cancelled", "knowing_more"]

BACKEND = "kubernetes"


class ClusterHistory:
    """The history of the jobs in the ``cluster`` context's namespace."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._kept: set[str] = set()  # uids this process kept (or found kept)
        self._last: dict[str, JobStatus] = {}  # uid -> the status this process kept last

    def is_kept(self, job: dict[str, Any]) -> bool:
        uid = str(job["metadata"].get("uid") or "")
        if uid in self._kept:
            return True
        found = kept(BACKEND, job["metadata"]["name"])
        if found is not None and found.uid == uid:
            self._kept.add(uid)
            return True
        return False

    def keep(self, job: dict[str, Any], pods: dict[str, Any], status: JobStatus) -> None:
        """Keep the ended job's logs (once per job object) and ``status`` (again when a later
        look differs: the watch may learn how a replica ended after the job's end)."""
        uid = str(job["metadata"].get("uid") or "")
        if self.is_kept(job):
            if uid in self._last:
                status = knowing_more(status, self._last[uid])
            if uid in self._last and self._last[uid] != status:
                keep(BACKEND, status, job_shape(job), uid, self.cluster.namespace)
                self._last[uid] = status
            return
        lines = FollowedLines.of_job(job)
        by_pod: dict[str, list[tuple[int, str]]] = {}
        with contextlib.suppress(ClusterError):  # what could be read is kept
            for pod, raw in stored_logs(self.cluster, job, pods, stamped=True):
                parsed = split_stamped(raw.encode())
                if parsed is not None:
                    by_pod.setdefault(pod, []).append(parsed)
        for pod, stamped in by_pod.items():
            lines.add_missing(pod, stamped)
        folder = keep(BACKEND, status, job_shape(job), uid, self.cluster.namespace)
        for other in (folder / "logs").glob("*"):  # an earlier job of the name's
            if other.name != uid:
                shutil.rmtree(other, ignore_errors=True)
        prune_logs(BACKEND)
        self._kept.add(uid)
        self._last[uid] = status

    def gone(self, name: str, exc: JobNotFound) -> KeptJob:
        """The history of job ``name``, whose objects are gone; ``exc`` when none is kept."""
        found = kept(BACKEND, name)
        if found is None or found.namespace not in ("", self.cluster.namespace):
            raise exc
        return found

    def logs(self, name: str, exc: JobNotFound, stamped: bool) -> Iterator[tuple[str, str]]:
        """The kept lines of the gone job ``name``, pod by pod."""
        found = self.gone(name, exc)
        lines = FollowedLines(found.folder / "logs" / (found.uid or "no-uid"))
        for pod in lines.pods():
            yield from ((pod, line) for line in lines.lines(pod, stamped))

    def listed(self, present: set[str]) -> list[JobStatus]:
        """The kept jobs of this namespace whose objects are gone (not in ``present``)."""
        out = []
        for name in kept_names(BACKEND):
            try:
                found = None if name in present else kept(BACKEND, name)
            except StoreVersionError:  # a newer version's: `%ktrain status NAME` says so
                continue
            if found is not None and found.namespace in ("", self.cluster.namespace):
                out.append(found.status)
        return out

    def started(self, name: str) -> None:
        """A new job of the name was created: the earlier one's history is no more its own."""
        forget_state(BACKEND, name)


def cancelled(status: JobStatus, by: str) -> JobStatus:
    """``status`` of a job that ran when ``%ktrain cancel``/``delete`` (``by``) removed it,
    as it is kept: Cancelled."""
    return replace(
        status,
        state=CANCELLED,
        reason="Deleted",
        message=f"cancelled: the job and its pods were deleted while it ran (by {by})",
        finished=time.time(),
    )


def knowing_more(status: JobStatus, before: JobStatus) -> JobStatus:
    """``status``, with what ``before`` (an earlier look at the same ended job) knew of the
    replicas whose pods are gone since: a watch started after the operator deleted a pod (a
    new command, a watch restarted when idle) sees no pod where the earlier one saw it end."""
    known = {r.name: r for r in before.replicas if r.phase != NOT_CREATED}
    replicas = tuple(known.get(r.name, r) if r.phase == NOT_CREATED else r for r in status.replicas)
    if replicas == status.replicas:
        return status
    codes = {**status.exit_codes, **before.exit_codes}  # the ranks' own, as first seen
    return replace(status, replicas=replicas, exit_codes=codes)
