"""A cluster job's logs: the streams a follow reads (one :class:`~.logs.PodLogSource` per pod,
more as pods appear) and the stored lines (:mod:`.stored_logs`); once the job's objects are
gone, the lines kept in its history (:class:`~.cluster_history.ClusterHistory`)."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from ....errors import JobNotFound
from ....kinds import KIND_TABLE
from ...logsource import LogSource
from ..cluster import Cluster
from ..lookup import kind_of, watch
from ..status.cluster_history import ClusterHistory
from ..status.derive import replica_pods
from .pod import FollowedLines, PodLogSource, split_stamped
from .stored import stored_logs

__all__ = ["JobLogs"]


class JobLogs:
    """The logs of the jobs in the ``cluster`` context's namespace."""

    def __init__(self, cluster: Cluster, history: ClusterHistory) -> None:
        self.cluster = cluster
        self.history = history

    def sources(self, name: str, known: Collection[str] = ()) -> list[LogSource]:
        """Sources for the job's pods not in ``known``: a TrainJob's pods appear as JobSet
        creates them (and a replaced Job pod has a new name), so a follower asks again."""
        try:
            found = watch(self.cluster, name)
        except JobNotFound:  # deleted (a cancel): its status, from its history, says so
            return []
        job = found.job
        if job is None:  # deleted: status() says so
            return []
        container = KIND_TABLE[job.get("kind") or kind_of(self.cluster, name)].container
        pods = [p for p in replica_pods(job) or sorted(found.pods) if p not in known]
        rt = self.cluster.runtimes.of(name)
        if rt.followed is None:
            rt.followed = FollowedLines.of_job(job)
        api = self.cluster.api
        return [
            PodLogSource(api, found, pod, container, rt.on_followed, rt.followed_end)
            for pod in pods
        ]

    def read(self, name: str, stamped: bool = False) -> Iterator[tuple[str, str]]:
        """The stored lines of the job's pods; once its objects are gone, the kept ones."""
        try:
            found = watch(self.cluster, name)
            if found.job is None:
                raise JobNotFound(
                    f"Job {name!r} is gone from namespace {self.cluster.namespace!r}."
                )
        except JobNotFound as exc:
            yield from self.history.logs(name, exc, stamped)
            return
        yield from stored_logs(self.cluster, found.job, found.pods, stamped)

    def read_timed(self, name: str) -> Iterator[tuple[float | None, str, str]]:
        """Stored lines with the kubelet's timestamps (``timestamps=true``)."""
        for pod, raw in self.read(name, stamped=True):
            parsed = split_stamped(raw.encode())
            if parsed is None:
                yield None, pod, raw
            else:
                yield parsed[0] / 1e9, pod, parsed[1]
