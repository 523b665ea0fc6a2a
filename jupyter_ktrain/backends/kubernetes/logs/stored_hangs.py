"""A cluster job's hang, said from where its state is kept: the lines its pods stored, with the
kubelet's times (``pods/log?timestamps=true``), whether a kernel follows the job or not. What a
detached job's ``%ktrain status`` and the side panel say, as a followed job's cell says it.

The same watch as a followed job's (:func:`~jupyter_ktrain.hangs.hang_in` feeds a
:class:`~jupyter_ktrain.hangs.HangWatch` each rank's lines and steps at the times the kubelet
stored them), with ``--hang-after`` read from the job's annotation and the attempt's start from
its pods' running containers (a restarted pod starts the watch again). The last
:data:`TAIL_LINES` of each pod are read, at most every :data:`CHECK_S` per job; on a hang,
every rank's stack is taken once (``pods/exec``, as ``%ktrain stacks``) and said with it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ....errors import KtrainError
from ....hangs import Hang, hang_in, hang_said
from ....jobs import RUNNING, JobStatus
from ....pod.protocol import Stack, parse_line
from ....pod.stacks import stacks_text
from ..client.fields import annotations_of, container_statuses
from ..cluster import Cluster
from ..labels import HANG_AFTER_ANNOTATION
from ..lookup import watch
from ..status.derive import job_shape
from .pod import parse_timestamp, split_stamped
from .stored import log_request

__all__ = ["CHECK_S", "TAIL_LINES", "StoredHangs"]

CHECK_S = 2.0  # the least time between two reads of a job's lines
TAIL_LINES = 1000  # of each pod's current container: enough for its pace and last step

Heard = tuple[float, int, int | None]


class StoredHangs:
    """The hangs of the jobs in the ``cluster`` context's namespace (module docstring);
    ``stacks(name)``: every running rank's (pod, stack)."""

    def __init__(self, cluster: Cluster, stacks: Callable[[str], list[tuple[str, Stack]]]) -> None:
        self.cluster = cluster
        self._stacks = stacks
        self._lock = threading.Lock()
        self._read: dict[str, tuple[float, dict[str, Any] | None]] = {}  # name: (t, said)
        # name: (the attempt's start, the ranks named, their stacks)
        self._taken: dict[str, tuple[float, tuple[int, ...], list[tuple[str, Stack]]]] = {}

    def hang(self, name: str, status: JobStatus) -> dict[str, Any] | None:
        """What is said of job ``name``'s hang now (``started``, ``t``, ``text``, ``stacks``,
        as a kept hang), or None: not running, or no hang."""
        if status.state != RUNNING:
            return None
        now = time.time()
        with self._lock:
            last = self._read.get(name)
        if last is not None and now - last[0] < CHECK_S:
            return last[1]
        said = self._said(name, status, now)
        with self._lock:
            self._read[name] = (now, said)
        return said

    def _said(self, name: str, status: JobStatus, now: float) -> dict[str, Any] | None:
        try:
            found = watch(self.cluster, name)
        except KtrainError:  # gone, or not readable: its status says so
            return None
        job, pods = found.job, found.pods
        if job is None or not pods:
            return None
        since = max([_started(p) for p in pods.values()] + [status.started or 0.0])
        shape = job_shape(job)
        heard, where = _heard(self._lines(job, pods))
        hang = hang_in(heard, _after(job), shape.nodes * shape.procs_per_node, since, now)
        if hang is None:
            with self._lock:
                self._taken.pop(name, None)
            return None
        got = self._stacks_of(name, hang, since)
        stacks = {s.rank: s for _, s in got if s.rank is not None}
        _, text = hang_said(hang, stacks, {r: f"pod {p}" for r, p in where.items()}, name)
        whole = stacks_text(name, got) if got else ""
        return {"started": status.started, "t": now, "text": text, "stacks": whole}

    def _stacks_of(self, name: str, hang: Hang, since: float) -> list[tuple[str, Stack]]:
        """The named ranks' stacks: taken once per hang (these ranks, this attempt)."""
        with self._lock:
            taken = self._taken.get(name)
        if taken is not None and taken[:2] == (since, hang.ranks):
            return taken[2]
        try:
            got = self._stacks(name)
        except Exception as exc:  # the hang is still named; only its stacks are missing
            got = [("", Stack(r, why=f"its stack could not be taken: {exc}")) for r in hang.ranks]
        with self._lock:
            self._taken[name] = (since, hang.ranks, got)
        return got

    def _lines(
        self, job: Mapping[str, Any], pods: Mapping[str, Any]
    ) -> Iterator[tuple[str, float, str]]:
        """(pod, time, line) of the last lines of each pod's current container."""
        for pod in sorted(pods):
            path, query = log_request(self.cluster, job, pod)
            query.update(timestamps=True, tailLines=TAIL_LINES)
            for raw in self.cluster.api.logs(path, query, partial=True):
                stamped = split_stamped(raw)
                if stamped is not None:
                    yield pod, stamped[0] / 1e9, stamped[1]


def _heard(lines: Iterator[tuple[str, float, str]]) -> tuple[list[Heard], dict[int, str]]:
    """Each rank's progress in ``lines``, and the pod each rank runs in."""
    heard: list[Heard] = []
    where: dict[int, str] = {}
    for pod, t, raw in lines:
        line = parse_line(raw)
        if line.rank is None:
            continue
        step = line.record.get("step") if line.record is not None else None
        heard.append((t, line.rank, step if type(step) is int else None))
        where[line.rank] = pod
    return heard, where


def _after(job: Mapping[str, Any]) -> float | None:
    """``--hang-after`` as the job carries it (None: the watch's own limits)."""
    raw = annotations_of(job).get(HANG_AFTER_ANNOTATION)
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


def _started(pod: Mapping[str, Any]) -> float:
    """When the pod's containers last started (0: none runs)."""
    times = [0.0]
    for cs in container_statuses(pod):
        with contextlib.suppress(ValueError, TypeError, KeyError):
            times.append(parse_timestamp(str((cs.state.get("running") or {})["startedAt"])) / 1e9)
    return max(times)
