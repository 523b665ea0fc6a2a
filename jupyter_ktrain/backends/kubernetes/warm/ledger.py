"""A warm job as the cluster tells it: its ledger (the order in its code ConfigMap:
:func:`~.warm.control_of`), its runs as its pods' agents recorded them (a
:class:`~.warm.RunBook`), and what ``%ktrain list`` shows of it (:class:`WarmInfo`). Read
here; the runs are ordered and followed by :class:`~.warm_backend.WarmJobs`."""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from typing import Any

from ....errors import ClusterError, JobNotFound
from ....jobs import RUNNING, WarmInfo
from ....pod.protocol import parse_line
from ..client.fields import labels_of, name_of
from ..client.resources import CONFIG_MAP
from ..client.retries import ApiFailure
from ..cluster import Cluster
from ..labels import WARM_LABEL
from ..logs.streams import JobLogs
from ..status.derive import job_shape
from .orders import RunBook, control_of

__all__ = ["WARM_REFRESH_S", "WarmLedger"]

WARM_REFRESH_S = 10.0  # a listed warm job's runs and idle time: read at most this often


class WarmLedger:
    """The warm jobs of the ``cluster`` context's namespace, as read: their ConfigMaps and
    their pods' logs (``logs``)."""

    def __init__(self, cluster: Cluster, logs: JobLogs) -> None:
        self.cluster = cluster
        self.logs = logs
        self._seen: dict[str, tuple[float, WarmInfo]] = {}  # job -> (when read, info)

    def configmap(self, name: str) -> dict[str, Any]:
        """The warm job's code ConfigMap (its ledger), as now."""
        path = CONFIG_MAP.path(self.cluster.namespace, f"{name}-code")
        got: dict[str, Any] = self.cluster.api.get(path)
        return got

    def put_configmap(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Write the ledger (409 when another kernel wrote it first); the ConfigMap as now."""
        path = CONFIG_MAP.path(self.cluster.namespace, f"{name}-code")
        got: dict[str, Any] = self.cluster.api.replace(path, body)
        return got

    def control(self, name: str) -> dict[str, Any]:
        """The order in the warm job's ledger."""
        return control_of(self.configmap(name))

    def book(self, name: str) -> RunBook:
        """The job's runs: as followed, or read from its pods' stored logs when no run is
        followed in this process (a cancel from another cell, a new kernel)."""
        rt = self.cluster.runtimes.of(name)
        if rt.followers:
            return rt.book
        book = RunBook()
        with contextlib.suppress(ClusterError, JobNotFound):  # gone: no runs to read
            for pod, raw in self.logs.read(name):
                book.feed(pod, parse_line(raw))
        return book

    def info(self, job: dict[str, Any], state: str) -> WarmInfo | None:
        """A warm job's runs and idle time: its ConfigMap's order and its pods' records (read
        at most every WARM_REFRESH_S per job, like a list's progress)."""
        if WARM_LABEL not in labels_of(job):
            return None
        name = name_of(job)
        seen = self._seen.get(name)
        if seen is not None and time.monotonic() - seen[0] < WARM_REFRESH_S:
            return seen[1]
        shape = job_shape(job)
        control: dict[str, Any] = {}
        with contextlib.suppress(ApiFailure):
            control = self.control(name)
        book = self.book(name) if state == RUNNING else RunBook()
        last, ended, going = book.last_end()
        ordered = int(control.get("run") or 0)
        active = ordered if going or ordered > last else None
        since = ended or _created(job)
        info = WarmInfo(
            runs=max(ordered, last),
            active=active,
            idle_since=None if active else since,
            idle_limit_s=float(control.get("idle_limit_s") or 900.0),
            gpus=shape.nodes * shape.gpus_per_node,
        )
        self._seen[name] = (time.monotonic(), info)
        return info


def _created(job: dict[str, Any]) -> float | None:
    stamp = job["metadata"].get("creationTimestamp")
    with contextlib.suppress(ValueError, TypeError):
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    return None
