"""The object store behind the API server: resourceVersions, watch history, garbage collection.

One global, monotonically increasing resourceVersion (as etcd's revision). Every change is
appended to a bounded history that watches replay; a watch from a version older than the
history's start gets 410 Gone (``expire()`` forces that, as compaction does). Controllers
inside the cluster (scheduler, kubelet, operator, garbage collector) subscribe to the same
change stream through ``subscribe()``.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from . import errors
from .resources import Registry, Resource
from .selectors import Predicate

Event = tuple[int, str, str, dict[str, Any]]  # (rv, resource key, type, object)
_ALNUM = "bcdfghjklmnpqrstvwxz2456789"


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_nano() -> str:
    t = time.time_ns()
    secs = datetime.fromtimestamp(t // 1_000_000_000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{secs}.{t % 1_000_000_000:09d}Z"


def _spec_of(obj: dict[str, Any]) -> str:
    return json.dumps(
        {k: v for k, v in obj.items() if k not in ("metadata", "status")}, sort_keys=True
    )


class Store:
    """Thread-safe object store. Objects are dicts; callers always get deep copies."""

    def __init__(self, registry: Registry, history: int = 20000) -> None:
        self.registry = registry
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 1
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.history: list[Event] = []
        self.history_rvs: list[int] = []
        self.max_history = history
        self.compacted = 0
        self.watch_epoch = 0
        self._subs: list[queue.Queue[Event]] = []

    # -- change stream ----------------------------------------------------------------------

    def subscribe(self) -> queue.Queue[Event]:
        q: queue.Queue[Event] = queue.Queue()
        with self.lock:
            self._subs.append(q)
        return q

    def _record(self, res: Resource, typ: str, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        ev = (self.rv, res.key, typ, copy.deepcopy(obj))
        self.history.append(ev)
        self.history_rvs.append(self.rv)
        if len(self.history) > self.max_history:
            cut = len(self.history) // 2
            self.compacted = self.history_rvs[cut]
            del self.history[:cut], self.history_rvs[:cut]
        for q in self._subs:
            q.put(ev)
        self.cond.notify_all()

    def expire(self) -> None:
        """Compact all history: every watch or list from an older version gets 410 Gone."""
        with self.lock:
            self.compacted = self.rv
            self.history.clear()
            self.history_rvs.clear()

    def drop_watches(self) -> None:
        with self.lock:
            self.watch_epoch += 1
            self.cond.notify_all()

    # -- CRUD -------------------------------------------------------------------------------

    def _table(self, res: Resource) -> dict[tuple[str, str], dict[str, Any]]:
        return self.objects.setdefault(res.key, {})

    def get(self, res: Resource, ns: str, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self._table(res).get((ns, name))
            if obj is None:
                raise errors.not_found(res.plural, res.group, name)
            return copy.deepcopy(obj)

    def try_get(self, res: Resource, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self._table(res).get((ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, res: Resource, ns: str | None, pred: Predicate | None = None
    ) -> tuple[list[dict[str, Any]], int]:
        with self.lock:
            items = [
                copy.deepcopy(o)
                for (ons, _), o in sorted(self._table(res).items())
                if (ns is None or ons == ns) and (pred is None or pred(o))
            ]
            return items, self.rv

    def create(self, res: Resource, ns: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(_ALNUM, k=5))
            name = meta.get("name", "")
            if res.namespaced:
                meta["namespace"] = ns
                if (
                    res.plural != "events"
                    and self._table(self.registry.by_plural("namespaces")).get(("", ns)) is None
                ):
                    raise errors.not_found("namespaces", "", ns)
            else:
                meta.pop("namespace", None)
            key = (ns if res.namespaced else "", name)
            if key in self._table(res):
                raise errors.already_exists(res.plural, res.group, name)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if res.group:
                meta.setdefault("generation", 1)
            meta.pop("resourceVersion", None)
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            self._table(res)[key] = obj
            self._record(res, "ADDED", obj)
            return copy.deepcopy(obj)

    def replace(
        self, res: Resource, ns: str, name: str, new: dict[str, Any], subresource: str = ""
    ) -> dict[str, Any]:
        """PUT semantics: optimistic concurrency on metadata.resourceVersion when given."""
        with self.lock:
            key = (ns if res.namespaced else "", name)
            old = self._table(res).get(key)
            if old is None:
                raise errors.not_found(res.plural, res.group, name)
            want = (new.get("metadata") or {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise errors.conflict(res.plural, res.group, name)
            return self._commit(res, key, old, new, subresource)

    def mutate(
        self,
        res: Resource,
        ns: str,
        name: str,
        fn: Callable[[dict[str, Any]], None],
        subresource: str = "",
    ) -> dict[str, Any] | None:
        """Read-modify-write under the lock (controllers); None when the object is gone."""
        with self.lock:
            key = (ns if res.namespaced else "", name)
            old = self._table(res).get(key)
            if old is None:
                return None
            new = copy.deepcopy(old)
            fn(new)
            if new == old:
                return copy.deepcopy(old)
            return self._commit(res, key, old, new, subresource)

    def _commit(
        self,
        res: Resource,
        key: tuple[str, str],
        old: dict[str, Any],
        new: dict[str, Any],
        subresource: str,
    ) -> dict[str, Any]:
        new = copy.deepcopy(new)
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status", {})
            new = merged
        elif "status" in res.subresources:
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
            else:
                new.pop("status", None)
        meta = new.setdefault("metadata", {})
        for k in ("uid", "creationTimestamp", "namespace", "name", "generation"):
            if k in old["metadata"]:
                meta[k] = old["metadata"][k]
        if "generation" in meta and subresource != "status" and _spec_of(new) != _spec_of(old):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        self._table(res)[key] = new
        self._record(res, "MODIFIED", new)
        return copy.deepcopy(new)

    def delete(
        self, res: Resource, ns: str, name: str, propagation: str = "Background"
    ) -> dict[str, Any]:
        with self.lock:
            key = (ns if res.namespaced else "", name)
            obj = self._table(res).pop(key, None)
            if obj is None:
                raise errors.not_found(res.plural, res.group, name)
            obj["metadata"]["deletionTimestamp"] = now()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            self._record(res, "DELETED", obj)
            uid = obj["metadata"]["uid"]
            dependents = self._dependents(uid)
        if propagation == "Orphan":
            for dres, dns, dname in dependents:
                self.mutate(dres, dns, dname, lambda o, u=uid: _drop_owner(o, u))
        elif dependents:
            threading.Thread(target=self._collect, args=(dependents,), daemon=True).start()
        if res.plural == "namespaces":
            threading.Thread(target=self._purge_namespace, args=(name,), daemon=True).start()
        return copy.deepcopy(obj)

    def _dependents(self, uid: str) -> list[tuple[Resource, str, str]]:
        out = []
        for rkey, table in self.objects.items():
            for (ons, oname), o in table.items():
                refs = o["metadata"].get("ownerReferences") or []
                if any(r.get("uid") == uid for r in refs):
                    group, plural = rkey.split("/", 1)
                    out.append((self.registry.by_plural(plural, group), ons, oname))
        return out

    def _collect(self, dependents: list[tuple[Resource, str, str]]) -> None:
        for dres, dns, dname in dependents:
            with contextlib.suppress(errors.ApiError):
                self.delete(dres, dns, dname)

    def _purge_namespace(self, ns: str) -> None:
        with self.lock:
            doomed = [
                (rkey, oname)
                for rkey, table in self.objects.items()
                for (ons, oname) in table
                if ons == ns
            ]
        for rkey, oname in doomed:
            group, plural = rkey.split("/", 1)
            with contextlib.suppress(errors.ApiError):
                self.delete(self.registry.by_plural(plural, group), ns, oname)

    # -- watch ------------------------------------------------------------------------------

    def watch(
        self,
        res: Resource,
        ns: str | None,
        since: int | None,
        pred: Predicate,
        deadline: float,
        bookmark_every: float | None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Yields (type, object); ("BOOKMARK", {rv}) periodically when asked. Raises 410 Gone
        (as an ApiError) before the first event when ``since`` is older than the history."""

        def match(o: dict[str, Any]) -> bool:
            return (ns is None or o["metadata"].get("namespace", "") == ns) and pred(o)

        with self.lock:
            epoch = self.watch_epoch
            if since is None:
                initial = [("ADDED", o) for o in self.list(res, ns, pred)[0]]
                pos = self.rv
            else:
                if since < self.compacted:
                    raise errors.gone(f"too old resource version: {since} ({self.compacted})")
                initial, pos = [], since
        yield from initial
        last_mark = time.monotonic()
        while True:
            with self.lock:
                if self.watch_epoch != epoch:
                    return
                if pos < self.compacted:
                    raise errors.gone(f"too old resource version: {pos} ({self.compacted})")
                i = bisect.bisect_right(self.history_rvs, pos)
                batch = [e for e in self.history[i:] if e[1] == res.key]
                if self.history_rvs[i:]:
                    pos = self.history_rvs[-1]
                if not batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return
                    self.cond.wait(min(left, 0.25))
                current = self.rv
            for _, _, typ, obj in batch:
                if match(obj):
                    yield typ, copy.deepcopy(obj)
            if bookmark_every is not None and time.monotonic() - last_mark >= bookmark_every:
                last_mark = time.monotonic()
                yield (
                    "BOOKMARK",
                    {"metadata": {"resourceVersion": str(max(pos, 1) if pos else current)}},
                )


def _drop_owner(obj: dict[str, Any], uid: str) -> None:
    refs = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != uid]
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)


def emit_event(
    store: Store,
    obj: dict[str, Any],
    reason: str,
    message: str,
    typ: str = "Normal",
    component: str = "kubelet",
) -> None:
    """Record a core/v1 Event about ``obj``, as the scheduler, kubelet or operator does."""
    meta = obj["metadata"]
    ns = meta.get("namespace") or "default"
    ts = now()
    event = {
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": ns},
        "involvedObject": {
            "kind": obj.get("kind"),
            "namespace": ns,
            "name": meta["name"],
            "uid": meta.get("uid"),
            "apiVersion": obj.get("apiVersion"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
        "type": typ,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }
    with contextlib.suppress(errors.ApiError):
        store.create(store.registry.by_plural("events"), ns, event)
