"""One pod's log as a :class:`~..logsource.LogSource`: nothing lost, nothing twice.

A background thread waits (on the job's watch cache, no requests) until the pod exists and its
container has started, then follows ``pods/log`` with ``timestamps=true``. When the stream
breaks it resumes with ``sinceTime`` (whole seconds, as the API accepts) and drops what it had
already delivered: lines older than the last timestamp, and lines at exactly that timestamp
that were delivered already (counted, so two identical lines in one nanosecond both survive).
When the container restarted meanwhile, the previous container's tail comes first
(``previous=true``); when the pod was deleted and made anew (the operator's ExitCode policy, a
deleted pod), the new pod's log follows. The stream ends when the container has terminated
for good (the pod succeeded, or the job is over), or the pod is gone and the job is over. A
failed pod of a running job is waited on: the operator may not have deleted it yet to make it
anew, and its next pod's log belongs to this stream too.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ....errors import ClusterError
from ...logsource import LogSource
from ..client.fields import ContainerStatus, container_statuses, pod_phase
from ..client.kube_api import Api
from ..client.resources import POD
from ..status.watch import JobWatch

__all__ = ["FollowedLines", "PodLogSource", "format_stamp", "parse_timestamp", "split_stamped"]

FINISH_WAIT_S = 15.0
KEPT_BYTES = 16 * 1024 * 1024  # per pod, of the lines a follow read: what outlives a deleted pod
FLUSH_LINES = 256  # a follow's kept lines are written this many at a time, or
FLUSH_S = 0.25  # this long after the last write


_last_second: tuple[str, int] = ("", 0)  # the last whole second parsed: a stream's next lines


def parse_timestamp(ts: str) -> int:
    """RFC3339(Nano) -> integer nanoseconds since the epoch (exact, for ordering). The lines
    of a stream share their second: it is parsed once (a flood's 48,000 lines, each stamped,
    spent a third of a second of CPU parsing the same seconds again)."""
    global _last_second
    base, _, frac = ts.rstrip("Z").partition(".")
    base = base[:19]
    seen, secs = _last_second
    if base != seen:
        when = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
        secs = int(when.timestamp())
        _last_second = (base, secs)
    return secs * 1_000_000_000 + int((frac + "000000000")[:9] or 0)


def format_since(ns: int) -> str:
    """Whole seconds (floor): the API's sinceTime is second precision."""
    return datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_stamp(ns: int) -> str:
    """Integer nanoseconds since the epoch -> RFC3339Nano, as the kubelet stamps a log line."""
    base = datetime.fromtimestamp(ns // 1_000_000_000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ns % 1_000_000_000:09d}Z"


class FollowedLines:
    """The lines the follows of one job read, per pod, kept in the job store:
    ``$KTRAIN_HOME/history/kubernetes/NAME/logs/UID/POD.log`` (private; ``%ktrain delete
    --history`` removes it; :mod:`.cluster_history` keeps it past the job). A pod the
    operator deleted (``cleanPodPolicy: Running`` deletes a failed job's running pods) takes
    its log with it, and what a follow read of it is then all there is; on disk, every process
    reads it
    (``%ktrain logs``, a new kernel, the panel's server). Two processes following the job both
    write: a line is read once (by its kubelet timestamp and text). Each pod's file keeps its
    newest KEPT_BYTES or so.

    A follow's lines are written together: once :data:`FLUSH_LINES` wait, else
    :data:`FLUSH_S` after the first of them came, and when its stream ends (:meth:`flush`); a
    line that comes after a quiet spell is written at once. (One open and write per line cost a
    48,000-line flood 2 s of CPU; the kubelet sends a line per read.)"""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._lock = threading.Lock()
        self._made = False
        self._pending: dict[str, list[tuple[int, str]]] = {}
        self._written: dict[str, float] = {}  # pod: when its lines were last written

    @classmethod
    def of_job(cls, job: Mapping[str, Any]) -> FollowedLines:
        from ....store.records import job_dir

        meta = job.get("metadata") or {}
        uid = str(meta.get("uid") or "no-uid")
        return cls(job_dir("kubernetes", str(meta.get("name"))) / "logs" / uid)

    def add(self, pod: str, stamped: list[tuple[int, str]]) -> None:
        """Append lines a follow read (written together: see the class docstring; the file
        opened and closed each time: no file outlives a follow)."""
        now = time.monotonic()
        with self._lock:
            pending = self._pending.setdefault(pod, [])
            waited = bool(pending)
            pending.extend(stamped)
            if len(pending) < FLUSH_LINES and now - self._written.get(pod, 0.0) < FLUSH_S:
                if not waited:  # the first to wait: written within FLUSH_S whatever comes
                    timer = threading.Timer(FLUSH_S, self.flush, (pod,))
                    timer.daemon = True
                    timer.start()
                return
            self._pending[pod], self._written[pod] = [], now
        self._write(pod, pending)

    def flush(self, pod: str) -> None:
        """Write the pod's lines still waiting (its stream ended)."""
        with self._lock:
            pending = self._pending.pop(pod, [])
            self._written[pod] = time.monotonic()
        if pending:
            self._write(pod, pending)

    def add_missing(self, pod: str, stamped: Iterable[tuple[int, str]]) -> int:
        """Append the lines of ``stamped`` (kubelet timestamp, line) this file lacks (a pod's
        whole stored log, read when its job ended: what no follow read); how many."""
        self.flush(pod)
        have = set(self._entries(pod))
        missing = []
        for ts, line in stamped:
            if f"{ts} {line}" not in have:
                have.add(f"{ts} {line}")
                missing.append((ts, line))
        self._write(pod, missing)
        return len(missing)

    def _write(self, pod: str, stamped: list[tuple[int, str]]) -> None:
        with self._lock, contextlib.suppress(OSError):  # keeping a copy never stops a follow
            if not self._made:
                from ....store.files import make_private_dirs

                make_private_dirs(self.folder)
                self._made = True
            path = self.folder / f"{pod}.log"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as f:
                f.write("".join(f"{ts} {line}\n" for ts, line in stamped))
                size = f.tell()
            if size > KEPT_BYTES:
                self._trim(path)

    def _entries(self, pod: str) -> list[str]:
        if self._pending.get(pod):  # this follow's own lines, not yet written: first
            self.flush(pod)
        try:
            text = (self.folder / f"{pod}.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return []
        return text.splitlines()

    def _trim(self, path: Path) -> None:
        """Keep the newest half of the pod's file (replaced atomically)."""
        from ....store.files import replace_private

        data = path.read_bytes()
        tail = data[len(data) - KEPT_BYTES // 2 :]
        replace_private(path, tail[tail.find(b"\n") + 1 :])

    def pods(self) -> list[str]:
        try:
            return sorted(p.name[: -len(".log")] for p in self.folder.glob("*.log"))
        except OSError:
            return []

    def lines(self, pod: str, stamped: bool = False) -> list[str]:
        """``pod``'s lines, oldest first (each with its kubelet timestamp when ``stamped``)."""
        seen: set[str] = set()
        kept: list[tuple[int, str]] = []
        for entry in self._entries(pod):
            ts, sep, line = entry.partition(" ")
            if not sep or not ts.isdigit() or entry in seen:
                continue
            seen.add(entry)
            kept.append((int(ts), line))
        # in the kubelet's time order: lines a follow missed are appended when the job ends
        # (add_missing), after later ones it read (a stable sort keeps a pod's equal stamps)
        kept.sort(key=lambda e: e[0])
        return [f"{format_stamp(ts)} {line}" if stamped else line for ts, line in kept]


def split_stamped(raw: bytes) -> tuple[int, str] | None:
    text = raw.decode("utf-8", "replace").rstrip("\r")
    ts, sep, line = text.partition(" ")
    if not sep and not ts:
        return None
    try:
        return parse_timestamp(ts), line
    except ValueError:
        return None


class _Dedupe:
    """Boundary bookkeeping: the last timestamp and the lines delivered at exactly it."""

    def __init__(self) -> None:
        self.last = -1
        self.at_last: collections.Counter[str] = collections.Counter()
        self.replay: collections.Counter[str] = collections.Counter()

    def reconnect(self) -> None:
        self.replay = collections.Counter(self.at_last)

    def fresh(self, ts: int, line: str) -> bool:
        if ts < self.last:
            return False
        if ts == self.last:
            if self.replay[line] > 0:
                self.replay[line] -= 1
                return False
            self.at_last[line] += 1
            return True
        self.last, self.at_last, self.replay = (
            ts,
            collections.Counter([line]),
            collections.Counter(),
        )
        return True


class PodLogSource(LogSource):
    """Streams one pod's container log into a buffer ``read()`` drains."""

    def __init__(
        self,
        api: Api,
        watch: JobWatch,
        pod: str,
        container: str,
        on_lines: Callable[[str, list[tuple[int, str]]], None] | None = None,
        on_end: Callable[[str], None] | None = None,
    ):
        self.api = api
        self.watch = watch
        self.replica = pod
        self.container = container
        # (pod, [(timestamp ns, line)]) of the lines read together: kept, exit records, progress
        self.on_lines = on_lines
        self.on_end = on_end  # (pod): its stream ended
        self._buf: list[str] = []
        self._lock = threading.Lock()
        self._dedupe = _Dedupe()
        self._ended = threading.Event()
        self._stop = threading.Event()
        self._uid = ""
        self._thread = threading.Thread(target=self._run, name=f"logs-{pod}", daemon=True)
        self._thread.start()

    # -- LogSource --------------------------------------------------------------------------
    def read(self) -> list[str]:
        with self._lock:
            out, self._buf = self._buf, []
        return out

    def finish(self) -> list[str]:
        """The job ended: wait for this stream to drain (a container still running, e.g. a
        worker the operator leaves behind, gets a moment for lines in flight, not more)."""
        deadline = time.monotonic() + FINISH_WAIT_S
        while not self._ended.wait(0.2) and time.monotonic() < deadline:
            pod = self.watch.pods.get(self.replica)
            state = self._container(pod).state if pod else {}
            if pod is None or ("terminated" not in state and not _pod_done(pod)):
                self._ended.wait(1.0)
                break
        self._stop.set()
        return self.read()

    @property
    def done(self) -> bool:
        return self._ended.is_set() and not self._buf

    def close(self) -> None:
        self._stop.set()

    # -- the stream ---------------------------------------------------------------------------
    def _path(self) -> str:
        return POD.path(self.watch.namespace, self.replica) + "/log"

    def _emit(self, batches: Iterable[list[bytes]]) -> int:
        count = 0
        for batch in batches:
            fresh = []
            for raw in batch:
                parsed = split_stamped(raw)
                if parsed is not None and self._dedupe.fresh(*parsed):
                    fresh.append(parsed)
            with self._lock:
                self._buf.extend(line for _, line in fresh)
            count += len(fresh)
            if self.on_lines is not None and fresh:
                self.on_lines(self.replica, fresh)
            if self._stop.is_set():
                break
        return count

    def _container(self, pod: dict[str, Any]) -> ContainerStatus:
        """The status of the container this follows (an empty one before it is created)."""
        found = (cs for cs in container_statuses(pod) if cs.name == self.container)
        return next(found, ContainerStatus(self.container, 0, {}, {}))

    def _wait_started(self, gone_uid: str = "") -> dict[str, Any] | None:
        """The pod once its container has run (or None when the job ended without it); with
        ``gone_uid``, a pod other than that deleted one."""
        seen = -1
        while not self._stop.is_set():
            pod = self.watch.pods.get(self.replica)
            if pod is not None and gone_uid and pod["metadata"].get("uid") == gone_uid:
                pod = None  # the watch has not seen the deletion yet
            if pod is not None:
                cs = self._container(pod)
                if "running" in cs.state or "terminated" in cs.state or cs.restart_count:
                    return pod
            if self._job_over() and (pod is None or _pod_done(pod)):
                return None
            seen = self.watch.wait_change(seen, 1.0)
        return None

    def _job_over(self) -> bool:
        from ..status.derive import job_state

        job = self.watch.job
        return job is None or job_state(job)[0] in ("Succeeded", "Failed")

    def _fresh_pod(self) -> dict[str, Any] | None:
        pod: dict[str, Any] | None = self.api.find(self._path()[: -len("/log")])
        return pod

    def _run(self) -> None:
        try:
            self._follow_all()
        except ClusterError as exc:
            with self._lock:
                self._buf.append(f"[ktrain] log stream of {self.replica} failed: {exc}")
        finally:
            if self.on_end is not None:
                self.on_end(self.replica)
            self._ended.set()

    def _follow_all(self) -> None:
        pod = self._wait_started()
        streamed, prev_for, idle, seen = -1, 0, 0, -1
        while pod is not None and not self._stop.is_set():
            uid = pod["metadata"].get("uid", "")
            if uid != self._uid:  # first sight, or the pod was recreated
                self._uid, streamed, prev_for = uid, -1, 0
            cs = self._container(pod)
            restarts = cs.restart_count
            if restarts > 0 and restarts > streamed and prev_for != restarts:
                self._previous()  # the instance before the current one: its tail first
                prev_for = restarts
            if "running" not in cs.state and "terminated" not in cs.state:  # waiting (back-off)
                if self._job_over():
                    return
                seen = self.watch.wait_change(seen, 1.0)
                pod = self.watch.pods.get(self.replica) or self._fresh_pod()
                continue
            got = self._follow()
            streamed = restarts
            pod = self._fresh_pod()
            if pod is None:  # deleted: the operator makes it anew (ExitCode), or the job ended
                pod = self._wait_started(gone_uid=self._uid)
                continue
            cs = self._container(pod)
            if cs.restart_count > restarts:
                continue
            if "terminated" in cs.state and (_pod_done(pod) or self._job_over()):
                self._emit_since()  # a stream cut just before the end: the rest
                if pod_phase(pod) == "Failed" and not self._job_over():
                    # the operator may delete it and make it anew (ExitCode): wait for that
                    # pod, or for the job's end, before this stream is over
                    pod = self._wait_started(gone_uid=self._uid)
                    continue
                return
            idle = 0 if got else idle + 1
            self._stop.wait(min(0.05 * 2**idle, 1.0))

    def _query(self, follow: bool, previous: bool = False) -> dict[str, Any]:
        query: dict[str, Any] = {"container": self.container, "timestamps": True}
        if follow:
            query["follow"] = True
        if previous:
            query["previous"] = True
        elif self._dedupe.last >= 0:
            query["sinceTime"] = format_since(self._dedupe.last)
        return query

    def _follow(self) -> int:
        self._dedupe.reconnect()
        # nothing when the container is not running (yet, or any more) or the pod was deleted
        return self._emit(self.api.log_batches(self._path(), self._query(follow=True)))

    def _emit_since(self) -> int:
        self._dedupe.reconnect()
        return self._emit(self.api.log_batches(self._path(), self._query(follow=False)))

    def _previous(self) -> None:
        self._dedupe.reconnect()
        self._emit(self.api.log_batches(self._path(), self._query(False, previous=True)))


def _pod_done(pod: dict[str, Any]) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def wait_all(sources: Iterable[PodLogSource], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for s in sources:
        s._ended.wait(max(0.0, deadline - time.monotonic()))
