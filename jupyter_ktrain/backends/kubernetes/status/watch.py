"""Watches that keep a local cache of one job, its pods and their events.

:class:`Informer` lists a collection once, then WATCHes it from that resourceVersion: a
``410 Gone`` (on open or as an ERROR event) relists, a stream the server closes (its
``timeoutSeconds``, a restart) reconnects from the last version seen, bookmarks advance the
version, and errors after the shared retry policy back off and try again. A running job costs
three open streams however many pods it has; readers get the cache with no request at all.

:class:`JobWatch` is the three informers of one job (the job by name, its pods by the
``ktrain.io/job`` label, the namespace's events filtered to those objects) plus a condition
variable readers can wait on for any change. A job submitted to a Kueue queue gets a fourth,
started when the job is first seen with the queue label: the namespace's Workloads, of which
the one the job owns says whether Kueue admitted it.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ....errors import ClusterError
from ..client.fields import container_statuses, labels_of, pod_phase
from ..client.kube_api import Api, WatchExpired
from ..client.resources import EVENT, POD, WORKLOAD, Resource
from ..labels import JOB_LABEL
from . import kueue

__all__ = ["Informer", "JobWatch"]

WATCH_TIMEOUT_S = 290  # ask the server to end each watch after this; we reconnect
IDLE_S = 300.0  # a job's watch nobody read for this long stops (see JobWatch)
REAP_S = 10.0


class Informer:
    """List-then-watch one collection into ``objects`` (name -> object)."""

    def __init__(
        self,
        api: Api,
        path: str,
        query: Mapping[str, str],
        on_change: Callable[[str, dict[str, Any]], None],
        name: str = "informer",
    ):
        self.api = api
        self.path = path
        self.query = dict(query)
        self.on_change = on_change
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = threading.Event()
        self.error: Exception | None = None
        self.relists = 0
        self._rv = ""
        self._stop = threading.Event()
        self._end: Callable[[], None] | None = None  # ends the open watch stream
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching; the open stream is ended now (its connection closed), not when the
        server next sends something."""
        self._stop.set()
        end = self._end
        if end is not None:
            end()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def _opened(self, end: Callable[[], None]) -> None:
        self._end = end
        if self._stop.is_set():  # stopped while it opened
            end()

    def _list(self) -> None:
        data = self.api.get(self.path, self.query)
        fresh = {o["metadata"]["name"]: o for o in data.get("items") or []}
        gone = set(self.objects) - set(fresh)
        self.objects = fresh
        self._rv = (data.get("metadata") or {}).get("resourceVersion", "")
        self.relists += 1
        for name in gone:
            self.on_change("DELETED", {"metadata": {"name": name}})
        for obj in fresh.values():
            self.on_change("SYNC", obj)
        self.synced.set()

    def _watch_once(self) -> bool:
        """One watch stream; False when the version expired and a relist is needed."""
        query = {
            **self.query,
            "watch": "1",
            "resourceVersion": self._rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
        }
        events = self.api.watch(
            self.path, query, read_timeout=WATCH_TIMEOUT_S + 30, opened=self._opened
        )
        try:
            for kind, obj in events:
                if self._stop.is_set():
                    return True
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if rv:
                    self._rv = rv
                if kind == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    self.objects.pop(name, None)
                else:
                    self.objects[name] = obj
                self.on_change(kind, obj)
        except WatchExpired:
            return False
        return True

    def _run(self) -> None:
        need_list, backoff = True, 0.2
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                need_list = not self._watch_once()
                backoff = 0.2
            except ClusterError as exc:
                self._failed(exc, backoff)
                backoff = min(backoff * 2, 5.0)

    def _failed(self, exc: Exception, backoff: float) -> None:
        self.error = exc
        self.synced.set()  # readers see the error instead of waiting forever
        self._stop.wait(backoff)


class JobWatch:
    """The cache of one job: ``job`` (or None), ``pods`` and ``events`` by object name.

    A watch nobody has read for :data:`IDLE_S` is stopped (checked every :data:`REAP_S`, by
    one thread for all): a kernel that looked at a job once holds no connection for it after.
    Its owner starts a new one when the job is read again (:attr:`running`)."""

    def __init__(self, api: Api, namespace: str, resource: Resource, name: str):
        self.api = api
        self.last_read = time.monotonic()
        self.name = name
        self.namespace = namespace
        self.changed = threading.Condition()
        self.generation = 0
        self.events: dict[str, dict[str, Any]] = {}  # involved object name -> latest event
        self.recreated: dict[str, float] = {}  # pod name -> when it came back with a new uid
        self.recreations: collections.Counter[str] = collections.Counter()  # pod -> how often
        # pod name -> (exit code, reason) of its last container that ended, or (None,
        # "deleted") for one deleted while it ran: why the replica restarted
        self.last_exit: dict[str, tuple[int | None, str]] = {}
        # pod name -> the pod as last seen before it was deleted (the operator's clean-up as the
        # job ended, ``kubectl delete``): its replica says so instead of "not created"
        self.deleted: dict[str, dict[str, Any]] = {}
        self._uids: dict[str, str] = {}
        self.suspended = False  # the job is suspended (queued, or taken back by its queue)
        self.job_informer = Informer(
            api,
            resource.path(namespace),
            {"fieldSelector": f"metadata.name={name}"},
            self._on_job,
            f"watch-{name}",
        )
        self.pod_informer = Informer(
            api,
            POD.path(namespace),
            {"labelSelector": f"{JOB_LABEL}={name}"},
            self._on_pod,
            f"watch-{name}-pods",
        )
        self.event_informer = Informer(
            api,
            EVENT.path(namespace),
            {},
            self._on_event,
            f"watch-{name}-ev",
        )
        self._informers = (self.job_informer, self.pod_informer, self.event_informer)
        self.workload_informer: Informer | None = None

    def start(self) -> JobWatch:
        for informer in self._informers:
            informer.start()
        _reaper.track(self)
        return self

    def stop(self) -> None:
        for informer in self._informers:
            informer.stop()
        if self.workload_informer is not None:
            self.workload_informer.stop()

    def wait_synced(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for informer in self._informers:
            informer.synced.wait(max(0.0, deadline - time.monotonic()))
        if self.workload_informer is not None:  # started as the job was first listed
            self.workload_informer.synced.wait(max(0.0, deadline - time.monotonic()))
        for informer in (self.job_informer, self.pod_informer):
            if not informer.synced.is_set() or (informer.error and not informer.relists):
                raise informer.error or ClusterError(
                    f"No answer from the API server about {self.name!r} within {timeout:.0f} s."
                )

    @property
    def running(self) -> bool:
        """Every informer still watches (none stopped: idle, or :meth:`stop`)."""
        informers = (*self._informers, self.workload_informer)
        return all(i.running for i in informers if i is not None)

    @property
    def idle(self) -> bool:
        """Nobody read it for :data:`IDLE_S`."""
        return time.monotonic() - self.last_read >= IDLE_S

    @property
    def job(self) -> dict[str, Any] | None:
        self.last_read = time.monotonic()
        return self.job_informer.objects.get(self.name)

    @property
    def pods(self) -> dict[str, dict[str, Any]]:
        return dict(self.pod_informer.objects)

    @property
    def workload(self) -> dict[str, Any] | None:
        """The job's Kueue Workload (the newest one it owns), or None."""
        job, informer = self.job, self.workload_informer
        if job is None or informer is None:
            return None
        return owned_workload(job, informer.objects.values())

    def wait_change(self, seen: int, timeout: float) -> int:
        """Block until the cache changes after generation ``seen`` (or ``timeout``)."""
        self.last_read = time.monotonic()
        with self.changed:
            if self.generation == seen:
                self.changed.wait(timeout)
            return self.generation

    def _bump(self) -> None:
        with self.changed:
            self.generation += 1
            self.changed.notify_all()

    def _on_job(self, kind: str, obj: dict[str, Any]) -> None:
        labels = labels_of(obj)
        if self.workload_informer is None and kueue.QUEUE_LABEL in labels:
            self.workload_informer = Informer(
                self.api,
                WORKLOAD.path(self.namespace),
                {},
                lambda _kind, _obj: self._bump(),
                f"watch-{self.name}-wl",
            ).start()
        was, self.suspended = self.suspended, kind != "DELETED" and suspended(obj)
        if self.suspended and not was:
            # a queue (Kueue) took the job back: its pods are deleted and made anew when it is
            # admitted again, a fresh start, not restarts of a fault
            self._uids.clear()
            self.recreations.clear()
            self.recreated.clear()
            self.last_exit.clear()
            self.deleted.clear()
        self._bump()

    def _on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name, uid = meta.get("name", ""), meta.get("uid")
        if self.suspended:  # its pods going away as the job is suspended: not a fault
            self._uids.pop(name, None)
            self._bump()
            return
        if kind == "DELETED":
            self.deleted[name] = obj
        else:
            self.deleted.pop(name, None)
        ended = terminated(obj)
        if ended is not None:
            self.last_exit[name] = ended
        elif kind == "DELETED" and pod_phase(obj) == "Running":
            self.last_exit[name] = (None, "deleted")
        if uid:
            old = self._uids.get(name)
            if old is not None and old != uid:
                self.recreated[name] = time.time()
                self.recreations[name] += 1
            self._uids[name] = uid
        self._bump()

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        involved = obj.get("involvedObject") or {}
        target = involved.get("name", "")
        if target != self.name and not target.startswith(self.name + "-"):
            return
        # the operator names each pod's Service after the pod: only the pods' own events (and
        # the job's) say anything about a replica
        if involved.get("kind") in _NOT_REPLICAS:
            return
        current = self.events.get(target)
        if current is None or _event_time(obj) >= _event_time(current):
            self.events[target] = obj
            self._bump()


def suspended(job: Mapping[str, Any]) -> bool:
    """The job is suspended: a Kubeflow v1 job's ``runPolicy.suspend``, a TrainJob's or
    JobSet's ``suspend``."""
    spec = job.get("spec") or {}
    return bool((spec.get("runPolicy") or {}).get("suspend") or spec.get("suspend"))


def owned_workload(
    job: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The newest of ``workloads`` whose controller is ``job`` (Kueue makes a new one when the
    job's pod sets change; the old one is deleted)."""
    kind, name = str(job.get("kind") or ""), job["metadata"]["name"]
    uid = job["metadata"].get("uid")

    def mine(workload: Mapping[str, Any]) -> bool:
        ref = kueue.owner_of(workload)
        return (
            ref.get("name") == name
            and (not kind or ref.get("kind") in ("", None, kind))
            and (uid is None or ref.get("uid") in (None, uid))
        )

    found = [w for w in workloads if mine(w)]
    if not found:
        return None
    return dict(max(found, key=lambda w: str(w["metadata"].get("creationTimestamp") or "")))


_NOT_REPLICAS = frozenset({"Service", "Endpoints", "EndpointSlice", "ConfigMap"})


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def terminated(pod: Mapping[str, Any]) -> tuple[int | None, str] | None:
    """(exit code, reason) of the pod's first container that has ended (now or before its
    last restart), or None."""
    for cs in container_statuses(pod):
        term = cs.terminated
        if term is not None and term.exit_code is not None:
            return term.exit_code, term.reason
    return None


class _Reaper:
    """Stops the job watches nobody reads (one daemon thread, started with the first)."""

    def __init__(self) -> None:
        self.watches: weakref.WeakSet[JobWatch] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def track(self, watch: JobWatch) -> None:
        with self.lock:
            self.watches.add(watch)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="watch-reaper", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(REAP_S)
            with self.lock:
                watches = list(self.watches)
            for watch in watches:
                if watch.running and watch.idle:
                    watch.stop()


_reaper = _Reaper()


def close_quietly(watch: JobWatch | None) -> None:
    with contextlib.suppress(Exception):
        if watch is not None:
            watch.stop()
