"""The process kubelet: runs the containers of pods bound to its nodes as local processes.

Pod lifecycle as the kubelet reports it: Pending (ContainerCreating) -> Running -> Succeeded
or Failed; containerStatuses with state/lastState, exit codes (128+signal when killed),
``reason: OOMKilled`` on request, restartCount, restarts per restartPolicy with a short
back-off (0.5 s doubling to 8 s, instead of the kubelet's 10 s to 5 min, to keep tests quick),
init containers in order, and one log file per container start (for ``previous``). Isolation:
see ``sandbox.py``; image layers: see ``images.py``.
"""

from __future__ import annotations

import contextlib
import copy
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import sandbox
from .images import Image, Puller
from .logs import Logs
from .store import Store, emit_event, now

POLL = 0.05


@dataclass
class _Run:
    spec: dict[str, Any]
    init: bool = False
    restarts: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started: str = ""
    state: dict[str, Any] = field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last: dict[str, Any] = field(default_factory=dict)
    kill_reason: str = ""
    force_restart: bool = False
    next_start: float = 0.0
    done: bool = False
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": f"process://{self.proc.pid}" if self.proc else "",
            "ready": running,
            "started": running,
            "restartCount": self.restarts,
            "state": copy.deepcopy(self.state),
            "lastState": copy.deepcopy(self.last),
        }


class PodWorker(threading.Thread):
    def __init__(self, kubelet: Kubelet, pod: dict[str, Any]) -> None:
        super().__init__(daemon=True, name=f"pod-{pod['metadata']['name']}")
        self.k = kubelet
        self.pod = pod
        self.ns = pod["metadata"]["namespace"]
        self.name = pod["metadata"]["name"]
        self.uid = pod["metadata"]["uid"]
        self.node = pod["spec"]["nodeName"]
        self.dir = kubelet.root / "pods" / self.uid
        self.hosts = self.dir / "hosts"
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        spec = pod["spec"]
        self.inits = [_Run(c, init=True) for c in spec.get("initContainers") or []]
        self.runs = [_Run(c) for c in spec.get("containers", [])]
        self.policy = spec.get("restartPolicy", "Always")
        self.started_at = now()
        self.initialized = not self.inits
        self.mounts_by_volume: dict[str, tuple[str, Path | None, str]] = {}
        self.images: dict[str, Image] = {}

    # -- control from outside ---------------------------------------------------------------

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            procs = [r.proc for r in self.inits + self.runs if r.proc and r.proc.poll() is None]
        for p in procs:
            _killpg(p, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _killpg(p, signal.SIGKILL)

    def signal(self, container: str | None, sig: int, reason: str, force_restart: bool) -> None:
        with self.lock:
            for r in self.inits + self.runs:
                if (container is None or r.name == container) and r.proc and r.proc.poll() is None:
                    r.kill_reason, r.force_restart = reason, force_restart
                    _killpg(r.proc, sig)

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # report, as a kubelet would, rather than die silently
            emit_event(self.k.store, self.pod, "FailedSync", repr(exc), "Warning")

    def _setup(self) -> bool:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            sandbox.hosts_file(self.k.store, self.ns, self.hosts, self.name)
            self.mounts_by_volume = sandbox.prepare_volumes(
                self.k.store, self.pod, self.dir, self.k.root / "pvcs"
            )
            for r in self.inits + self.runs:
                ref = r.spec.get("image", "")
                if ref not in self.images:
                    self.images[ref] = self.k.puller.image(ref)
                    emit_event(
                        self.k.store,
                        self.pod,
                        "Pulled",
                        f'Container image "{ref}" already present on machine',
                    )
            return True
        except (sandbox.ConfigError, OSError) as exc:
            for r in self.inits + self.runs:
                r.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self._publish()
            return False

    def _loop(self) -> None:
        self._publish()
        while not self._setup():
            if self.stopping.wait(1.0):
                return
        while not self.stopping.is_set():
            active = self._active()
            for r in active:
                self._step(r)
            inits_done = self.inits and all(r.done for r in self.inits)
            if inits_done and not self.initialized:
                codes = [r.state.get("terminated", {}).get("exitCode") for r in self.inits]
                self.initialized = all(c == 0 for c in codes)
            self._publish()
            if self._finished():
                break
            self.stopping.wait(POLL)
        for r in self.inits + self.runs:
            for t in r.readers:  # a container is done once its output is in the log file
                t.join(timeout=60)
        if not self.stopping.is_set():
            self._publish()

    def _active(self) -> list[_Run]:
        if not self.initialized:
            pending = [r for r in self.inits if not r.done]
            if any(
                r.state.get("terminated", {}).get("exitCode", 0) != 0 and r.done for r in self.inits
            ):
                return []
            return pending[:1]
        return self.runs

    def _finished(self) -> bool:
        if not self.initialized:
            return any(r.done and r.state["terminated"]["exitCode"] != 0 for r in self.inits)
        return all(r.done for r in self.runs)

    def _step(self, r: _Run) -> None:
        if r.done:
            return
        if r.proc is None or r.proc.poll() is not None:
            if r.proc is not None and "running" in r.state:
                self._terminated(r)
                if r.done:
                    return
            if self.k.stalled(self.node):
                return
            if time.monotonic() >= r.next_start:
                self._start(r)

    def _terminated(self, r: _Run) -> None:
        assert r.proc is not None
        for t in r.readers:  # like a container runtime: the log is complete before the exit
            t.join(timeout=10)
        rc = r.proc.returncode
        code = 128 - rc if rc < 0 else rc
        reason = r.kill_reason or ("Completed" if code == 0 else "Error")
        r.state = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": r.started,
                "finishedAt": now(),
                "containerID": f"process://{r.proc.pid}",
            }
        }
        restart = (
            r.force_restart or self.policy == "Always" or (self.policy == "OnFailure" and code != 0)
        )
        if r.init and self.policy != "Never" and code != 0:
            restart = True
        if r.init and code == 0:
            restart = False
        r.kill_reason, r.force_restart = "", False
        if not restart:
            r.done = True
            return
        delay = 0.0 if code == 0 and not r.init else min(0.5 * 2 ** min(r.restarts, 4), 8.0)
        r.next_start = time.monotonic() + delay
        r.last = r.state
        r.restarts += 1
        if delay:
            r.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay}s restarting failed container={r.name} "
                    f"pod={self.name}_{self.ns}({self.uid})",
                }
            }
            emit_event(
                self.k.store,
                self.pod,
                "BackOff",
                "Back-off restarting failed container "
                f"{r.name} in pod {self.name}_{self.ns}({self.uid})",
                "Warning",
            )

    def _start(self, r: _Run) -> None:
        image = self.images.get(r.spec.get("image", ""), Image())
        try:
            base = sandbox.base_env(self.pod, self.k.api_port)
            for kv in image.env:
                k, _, v = kv.partition("=")
                base[k] = v
            env = sandbox.container_env(self.k.store, self.pod, r.spec, base)
        except sandbox.ConfigError as exc:
            r.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            r.next_start = time.monotonic() + 1.0
            return
        command = r.spec.get("command") or image.entrypoint
        args = r.spec.get("args") if "command" in r.spec or "args" in r.spec else image.cmd
        argv = [sandbox.expand(a, env) for a in list(command or []) + list(args or [])]
        if not argv:
            argv = ["sleep", "infinity"]  # no command and no known image entrypoint: idle
        mounts = [
            (kind, src, opt, m["mountPath"], bool(m.get("readOnly")))
            for m in r.spec.get("volumeMounts") or []
            for kind, src, opt in [self.mounts_by_volume.get(m["name"], ("dir", None, ""))]
            if src is not None or kind == "tmpfs"
        ]
        mounts += [("dir", host, "", dst, False) for host, dst in image.mounts]
        workdir = r.spec.get("workingDir") or image.workdir or "/"
        if self.k.use_unshare:
            script = sandbox.mount_script(mounts, self.hosts, workdir)
            full = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "--",
                "/bin/sh",
                "-c",
                script,
                "sh",
                *argv,
            ]
            cwd = "/"
        else:
            full = [sandbox.rewrite(a, mounts) for a in argv]
            env = {k: sandbox.rewrite(v, mounts) for k, v in env.items()}
            cwd = sandbox.rewrite(workdir, mounts)
            cwd = cwd if os.path.isdir(cwd) else "/"
        log = self.k.logs.path(self.uid, r.name, r.restarts)
        self.k.logs.opened(log)
        try:
            proc = subprocess.Popen(
                full,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.k.logs.closed(log)
            r.state = {"waiting": {"reason": "RunContainerError", "message": str(exc)}}
            r.next_start = time.monotonic() + 1.0
            return
        with self.lock:
            r.proc = proc
        r.started = now()
        r.state = {"running": {"startedAt": r.started}}
        r.readers = self._readers(proc, log)
        emit_event(self.k.store, self.pod, "Started", f"Started container {r.name}")

    def _readers(self, proc: subprocess.Popen[bytes], log: Path) -> list[threading.Thread]:
        remaining = [2]
        lock = threading.Lock()

        def pump(pipe: Any, stream: str) -> None:
            for line in iter(pipe.readline, b""):
                self.k.logs.write(log, stream, line)
            pipe.close()
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                proc.wait()
                self.k.logs.closed(log)

        threads = [
            threading.Thread(target=pump, args=(proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, "stderr"), daemon=True),
        ]
        for t in threads:
            t.start()
        return threads

    # -- status -----------------------------------------------------------------------------

    def _phase(self) -> str:
        runs = self.runs
        if not self.initialized:
            failed = any(r.done and r.state["terminated"]["exitCode"] != 0 for r in self.inits)
            return "Failed" if failed else "Pending"
        if all(r.done for r in runs):
            ok = all(r.state["terminated"]["exitCode"] == 0 for r in runs)
            return "Succeeded" if ok else "Failed"
        if any("running" in r.state or r.restarts or r.done for r in runs):
            return "Running"
        return "Pending"

    def _publish(self) -> None:
        if self.k.stalled(self.node) or self.stopping.is_set():
            return
        phase = self._phase()
        ready = all("running" in r.state for r in self.runs)
        ts = now()

        def cond(kind: str, ok: bool, reason: str = "") -> dict[str, Any]:
            c: dict[str, Any] = {
                "type": kind,
                "status": "True" if ok else "False",
                "lastProbeTime": None,
                "lastTransitionTime": ts,
            }
            if not ok and reason:
                c["reason"] = reason
            return c

        not_ready = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"

        def update(pod: dict[str, Any]) -> None:
            st = pod.setdefault("status", {})
            old = {c["type"]: c for c in st.get("conditions") or []}
            conds = [
                cond("Initialized", self.initialized, "ContainersNotInitialized"),
                cond("Ready", ready, not_ready),
                cond("ContainersReady", ready, not_ready),
                old.get("PodScheduled") or cond("PodScheduled", True),
            ]
            for c in conds:
                prev = old.get(c["type"])
                if prev and prev["status"] == c["status"]:
                    c["lastTransitionTime"] = prev.get("lastTransitionTime")
            st.update(
                phase=phase,
                conditions=conds,
                hostIP="127.0.0.1",
                hostIPs=[{"ip": "127.0.0.1"}],
                podIP="127.0.0.1",
                podIPs=[{"ip": "127.0.0.1"}],
                startTime=self.started_at,
                containerStatuses=[r.status() for r in self.runs],
            )
            if self.inits:
                st["initContainerStatuses"] = [r.status() for r in self.inits]

        self.k.store.mutate(self.k.pods, self.ns, self.name, update, "status")


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Kubelet(threading.Thread):
    """Watches pods bound to its nodes and runs them; keeps each pod's /etc/hosts current."""

    def __init__(
        self, store: Store, root: Path, api_port: int, registry: str | None = None
    ) -> None:
        super().__init__(daemon=True, name="kubelet")
        self.store = store
        self.root = root
        self.api_port = api_port
        self.pods = store.registry.by_plural("pods")
        self.logs = Logs(store, root / "logs")
        self.puller = Puller(registry, root / "images")
        self.use_unshare = sandbox.unshare_works()
        self.workers: dict[str, PodWorker] = {}
        self._stalled: set[str] = set()
        self._events = store.subscribe()
        self._stop = threading.Event()
        store.registry  # noqa: B018

    def stalled(self, node: str) -> bool:
        return node in self._stalled

    def stall(self, node: str, stalled: bool) -> None:
        (self._stalled.add if stalled else self._stalled.discard)(node)
        nodes = self.store.registry.by_plural("nodes")

        def flip(obj: dict[str, Any]) -> None:
            for c in obj.get("status", {}).get("conditions", []):
                if c["type"] == "Ready":
                    c.update(
                        status="Unknown" if stalled else "True",
                        reason="NodeStatusUnknown" if stalled else "KubeletReady",
                        message="Kubelet stopped posting node status."
                        if stalled
                        else "kubelet is posting ready status",
                        lastTransitionTime=now(),
                    )

        self.store.mutate(nodes, "", node, flip, "status")
        if not stalled:
            for w in list(self.workers.values()):
                if w.node == node:
                    w._publish()
            self._sync_all()

    def unstall_all(self) -> None:
        for node in list(self._stalled):
            self.stall(node, False)

    def signal(
        self,
        ns: str,
        pod: str,
        container: str | None,
        sig: int,
        reason: str = "",
        force_restart: bool = False,
    ) -> None:
        for w in list(self.workers.values()):
            if w.ns == ns and w.name == pod:
                w.signal(container, sig, reason, force_restart)

    def stop(self) -> None:
        self._stop.set()
        for w in list(self.workers.values()):
            w.stop()

    def run(self) -> None:
        self._sync_all()
        while not self._stop.is_set():
            try:
                _, key, typ, obj = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            if key == self.pods.key:
                self._pod_event(typ, obj)
            if key in ("/services", "/pods") and typ in ("ADDED", "DELETED"):
                ns = obj["metadata"].get("namespace")
                for w in list(self.workers.values()):
                    if w.ns == ns and w.hosts.exists():
                        sandbox.hosts_file(self.store, ns, w.hosts, w.name)

    def _sync_all(self) -> None:
        for pod in self.store.list(self.pods, None)[0]:
            self._pod_event("MODIFIED", pod)

    def _pod_event(self, typ: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if typ == "DELETED":
            w = self.workers.pop(uid, None)
            if w is not None:
                threading.Thread(target=w.stop, daemon=True).start()
            return
        node = pod.get("spec", {}).get("nodeName")
        phase = pod.get("status", {}).get("phase")
        if (
            not node
            or uid in self.workers
            or phase in ("Succeeded", "Failed")
            or self.stalled(node)
        ):
            return
        worker = PodWorker(self, pod)
        self.workers[uid] = worker
        worker.start()
