"""The process kubelet: the only stand-in of the test cluster. It registers Node objects with
the real API server (and renews their Leases), watches the pods the real scheduler binds to
them, runs their containers as local processes, reports pod status, and serves the kubelet API
over TLS (``kubelet_server.py``) so that logs reach clients through the real API server.

Pod lifecycle as the kubelet reports it: Pending (ContainerCreating) -> Running -> Succeeded
or Failed; containerStatuses with state/lastState, exit codes (128+signal when killed),
``reason: OOMKilled`` on request, restartCount, restarts per restartPolicy with a short
back-off (0.5 s doubling to 8 s, instead of the kubelet's 10 s to 5 min, to keep tests quick),
init containers in order, and one log file per container start (for ``previous``). Isolation:
see ``sandbox.py``; image layers: see ``images.py``.

Known differences from a real node (``realnode.py``: kubelet, containerd, runc), found by
running the same pods there; the tests of ``tests/integration/test_real_node.py`` cover each
on the real node:

- the image: its base layers are skipped and its ``python`` is this machine's (torch and all);
  the real node runs the image's own interpreter with only what the image holds.
- PID 1: a container's first process here is not PID 1 (the PID namespace is shared), so
  orphans are not handed to it; on the real node the agent is PID 1 and reaps them.
- signals on deletion: both send SIGTERM to the container's first process, then SIGKILL; the
  real kubelet after the pod's grace period (``terminationGracePeriodSeconds``, 30 s by
  default), this one after 3 s, whatever the pod says. A torchrun that takes longer than 3 s to
  stop its ranks (a loaded machine) ends 137 here where a real node sees 143:
  ``test_k8s_elastic_resume``'s deleted worker asserts 143 and fails then.
- memory limits are not enforced: ``OOMKilled`` comes only on request (``Faults.oom_kill``);
  the real node's cgroup kills the process and containerd reports ``OOMKilled``, exit 137.
- capabilities: containers here run with root's full set (``IPC_LOCK`` whether asked or not);
  the real node grants containerd's default set plus ``securityContext.capabilities.add``.
- names: every Service and Pod name of the namespace is in the pod's ``/etc/hosts``; the real
  node resolves them through CoreDNS and reaches ClusterIPs through kube-proxy.
- a missing image was ``CreateContainerConfigError`` here; now ``ErrImagePull`` then
  ``ImagePullBackOff`` with containerd's words, as the real node says it (fixed).
- images it cannot pull run their command on this machine: the Training Operator's PyTorchJob
  worker init container (``alpine:3.10``, ``nslookup`` of the master until it resolves) runs
  here with this machine's tools; a real node must pull it (the test cluster's real node
  mirrors it from the test registry, as an air-gapped cluster does).
- ``exec`` probes run this machine's tools (``wget``, ``bash``): KubeRay's probes of a pod whose
  RayJob names no ``rayVersion`` (``bash -c "wget ... | grep success"``) passed here, and never
  on the real node's slim Debian + Ray image (``wget: command not found``, the head not Ready,
  the job waiting for ever). Fixed in the product: a RayJob names the Ray its program pins,
  so KubeRay probes over HTTP (``test_real_node.py``'s RayJob test; the RayJob tests here
  now take that path too).
- liveness probes are not run (readiness only): a real kubelet restarts a container whose
  liveness probe fails.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import exec_ws, netns, probes, sandbox
from .image_shims import shim_image
from .images import Image, Puller
from .kubelet_server import KubeletServer
from .logs import Logs
from .pki import Pair
from .rest import ApiError, Rest

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
    context: tuple[dict[str, str], str] | None = None  # env and working dir, for exec
    execs: list[subprocess.Popen[bytes]] = field(default_factory=list)  # kubectl exec's
    prober: probes.Prober | None = None  # this start's readiness probe, if it has one

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def ready(self) -> bool:
        return "running" in self.state and (self.prober is None or self.prober.ready)

    def status(self) -> dict[str, Any]:
        running = "running" in self.state
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": f"process://{self.proc.pid}" if self.proc else "",
            "ready": self.ready,
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
        self.published = ""
        self.conditions: list[dict[str, Any]] = []
        self.initialized = not self.inits
        self.mounts_by_volume: dict[str, tuple[str, Path | None, str]] = {}
        self.images: dict[str, Image] = {}
        self.net: netns.PodNet | None = None  # the pod's own network, where there is one
        self.ip = kubelet.pod_ip
        # the pod's host name and, with a subdomain, its FQDN: the kubelet's own /etc/hosts line
        self.hostname = (spec.get("hostname") or self.name)[:63]
        self.own_names = [self.hostname]
        if spec.get("subdomain"):
            self.own_names.append(
                f"{self.hostname}.{spec['subdomain']}.{self.ns}.svc.cluster.local"
            )

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
        for r in self.inits + self.runs:
            self._end_execs(r)
        _kill_marked(f"{POD_MARK}={self.uid}")  # what left the process group, as a runtime would
        with self.lock:
            net, self.net = self.net, None
        if net is not None and self.k.net is not None:
            self.k.net.remove(net)

    def report_terminal(self) -> None:
        """After :meth:`stop` for a deletion: each container that ran reads terminated with
        its exit code and the pod a terminal phase, published before the deletion is
        confirmed, as the kubelet does since Kubernetes 1.27 (a Job's pod failure policy
        waits for that phase before it counts the pod and replaces it)."""
        with self.lock:
            for r in self.inits + self.runs:
                if r.proc is not None and "running" in r.state and r.proc.poll() is not None:
                    self._terminated_state(r)
                    r.done = True
        self._publish(force=True)

    def _end_execs(self, r: _Run) -> None:
        """The container's main process is gone: so is every process exec started in it (a
        runtime ends the whole container; mpirun then sees its daemon there die)."""
        with self.lock:
            execs, r.execs = r.execs, []
        for p in execs:
            if p.poll() is None:
                _killpg(p, signal.SIGKILL)

    def _track_exec(self, r: _Run, proc: subprocess.Popen[bytes]) -> None:
        with self.lock:
            r.execs = [p for p in r.execs if p.poll() is None] + [proc]

    def exec_target(self, container: str) -> exec_ws.Container | None:
        """Where ``kubectl exec`` runs in ``container``: its env and working directory, and
        its process, whose mount namespace the command enters (with ``unshare``); None when
        the container is not running."""
        run = next((r for r in self.runs if r.name == container), None)
        if run is None:
            return None
        with self.lock:
            proc, context = run.proc, run.context
        if proc is None or proc.poll() is not None or context is None:
            return None
        env, cwd = context
        pid = proc.pid if self.k.use_unshare else None
        return exec_ws.Container(env, cwd, pid, started=lambda p: self._track_exec(run, p))

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
            self.k.event(self.pod, "FailedSync", repr(exc), "Warning")

    def _setup(self) -> bool:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            if self.k.net is not None and self.net is None:
                with self.lock:
                    if self.stopping.is_set():
                        return False
                    self.net = self.k.net.add(self.uid, self.hostname)
                self.ip = self.net.ip
                self.pod.setdefault("status", {})["podIP"] = self.ip  # for the downward API
            self.k.write_hosts(self.ns, self.hosts, self.own_names, self.ip)
            self.mounts_by_volume = sandbox.prepare_volumes(
                self.k, self.pod, self.dir, self.k.root / "pvcs"
            )
            for r in self.inits + self.runs:
                ref = r.spec.get("image", "")
                if ref not in self.images:
                    try:
                        self.images[ref] = self.k.puller.image(ref)
                    except urllib.error.HTTPError as exc:
                        self._pull_failed(r, ref, exc)
                        return False
                    self.k.event(
                        self.pod, "Pulled", f'Container image "{ref}" already present on machine'
                    )
            return True
        except (sandbox.ConfigError, OSError, ApiError) as exc:
            for r in self.inits + self.runs:
                r.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(exc)}}
            self._publish()
            return False

    def _pull_failed(self, r: _Run, ref: str, exc: urllib.error.HTTPError) -> None:
        """As the real kubelet on containerd says it (seen on the real node): ``ErrImagePull``
        with containerd's message first, then ``ImagePullBackOff`` naming it, and the same
        events; the pod stays Pending while it retries."""
        code = "NotFound" if exc.code == 404 else "Unknown"
        msg = (
            f'rpc error: code = {code} desc = failed to pull and unpack image "{ref}": '
            f"failed to resolve image: {ref}: not found"
        )
        was = r.state.get("waiting", {}).get("reason")
        if was == "ImagePullBackOff":
            return  # retried each second here (the kubelet backs off 10 s doubling), said once
        if was == "ErrImagePull":
            r.state = {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": f'Back-off pulling image "{ref}": ErrImagePull: {msg}',
                }
            }
            self.k.event(self.pod, "BackOff", f'Back-off pulling image "{ref}"')
            self.k.event(self.pod, "Failed", "Error: ImagePullBackOff", "Warning")
        else:
            r.state = {"waiting": {"reason": "ErrImagePull", "message": msg}}
            self.k.event(self.pod, "Failed", f'Failed to pull image "{ref}": {msg}', "Warning")
            self.k.event(self.pod, "Failed", "Error: ErrImagePull", "Warning")
        self._publish()

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
        if r.done or self.stopping.is_set():
            return
        if r.prober is not None and "running" in r.state and not self.k.stalled(self.node):
            r.prober.tick()
        if r.proc is None or r.proc.poll() is not None:
            if r.proc is not None and "running" in r.state:
                self._terminated(r)
                if r.done:
                    return
            if self.k.stalled(self.node):
                return
            if time.monotonic() >= r.next_start:
                self._start(r)

    def _terminated_state(self, r: _Run) -> int:
        assert r.proc is not None
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
        return code

    def _terminated(self, r: _Run) -> None:
        assert r.proc is not None
        self._end_execs(r)
        for t in r.readers:  # like a container runtime: the log is complete before the exit
            t.join(timeout=10)
        code = self._terminated_state(r)
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
            self.k.event(
                self.pod,
                "BackOff",
                "Back-off restarting failed container "
                f"{r.name} in pod {self.name}_{self.ns}({self.uid})",
                "Warning",
            )

    def _start(self, r: _Run) -> None:
        image = self.images.get(r.spec.get("image", ""), Image())
        try:
            base = sandbox.base_env(self.pod, self.k.api_port, self.k.api_host)
            for kv in image.env:
                k, _, v = kv.partition("=")
                base[k] = v
            env = sandbox.container_env(self.k, self.pod, r.spec, base)
            env[POD_MARK] = self.uid  # the pod's processes, wherever they go (see stop)
        except (sandbox.ConfigError, ApiError) as exc:
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
            scratch = self.dir / "rootfs" / f"{r.name}-{r.restarts}"
            resolv = self.dir / "resolv.conf" if self.net else None
            if resolv is not None:
                sandbox.resolv_conf(self.ns, resolv)
            tmp = scratch / "tmp"  # the container's own /tmp
            script = sandbox.mount_script(
                mounts, self.hosts, workdir, scratch, resolv, tmp, self.k.shared
            )
            named = any(e.get("name") == "HOME" for e in r.spec.get("env") or [])
            if base["HOME"] == sandbox.HOST_HOME and not named:
                # its own home too, empty and fresh each start, as an image's is: not this
                # machine's, whose dot-files (a local Ray's ~/.ray/auth_token, which turns a
                # head's token auth on) would reach every pod
                (tmp / "home").mkdir(mode=0o700, exist_ok=True)
                env["HOME"] = "/tmp/home"
            full = [
                *(self.net.enter() if self.net else []),
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
        exec_cwd = workdir if self.k.use_unshare else cwd  # as the container's process sees it
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
            r.context = (env, exec_cwd)
        r.prober = self._prober(r, env, exec_cwd)
        r.started = now()
        r.state = {"running": {"startedAt": r.started}}
        r.readers = self._readers(proc, log)
        self.k.event(self.pod, "Started", f"Started container {r.name}")

    def _prober(self, r: _Run, env: dict[str, str], cwd: str) -> probes.Prober | None:
        """The container's readiness probe (a new one each start: it starts not ready)."""
        probe = r.spec.get("readinessProbe")
        if not probe or r.init or r.proc is None:
            return None
        pid = r.proc.pid if self.k.use_unshare else None
        target = exec_ws.Container(env, cwd, pid)
        host = self.ip if self.net is not None else "127.0.0.1"
        try:
            attempt = probes.attempt(
                probe, r.spec, host, lambda cmd: exec_ws.command_argv(target, cmd), env
            )
        except ValueError as exc:  # a port name the container does not have: never ready
            self.k.event(self.pod, "Unhealthy", f"Readiness probe errored: {exc}", "Warning")
            return probes.Prober(probe, lambda _timeout: False)
        return probes.Prober(probe, attempt) if attempt is not None else None

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

    def _main_status(self, r: _Run) -> dict[str, Any]:
        st = r.status()
        if not self.initialized and "waiting" in st["state"]:  # as the kubelet says it
            st["state"] = {"waiting": {"reason": "PodInitializing"}}
        return st

    def _publish(self, force: bool = False) -> None:
        if self.k.stalled(self.node) or (self.stopping.is_set() and not force):
            return
        phase = self._phase()
        ready = all(r.ready for r in self.runs)
        not_ready = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        conds = {
            "Initialized": (self.initialized, "ContainersNotInitialized"),
            "Ready": (ready, not_ready),
            "ContainersReady": (ready, not_ready),
        }
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            # the pod's own address (netns.py), else this machine's, not loopback: the
            # endpoints controllers refuse loopback, and Services get endpoints as on a cluster
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "startTime": self.started_at,
            "containerStatuses": [self._main_status(r) for r in self.runs],
        }
        if self.k.net is not None and self.net is None:  # no address yet (it cannot change)
            del status["podIP"], status["podIPs"]
        if self.inits:
            status["initContainerStatuses"] = [r.status() for r in self.inits]
        key = repr((status, conds))
        if key == self.published:  # only changes reach the API server
            return
        ts = now()
        old = {c["type"]: c for c in self.conditions}
        merged = []
        for kind, (ok, reason) in conds.items():
            c: dict[str, Any] = {"type": kind, "status": "True" if ok else "False"}
            if not ok and reason:
                c["reason"] = reason
            prev = old.get(kind)
            same = prev is not None and prev["status"] == c["status"]
            c["lastTransitionTime"] = prev["lastTransitionTime"] if same and prev else ts
            merged.append(c)
        merged.append(
            old.get("PodScheduled")
            or {"type": "PodScheduled", "status": "True", "lastTransitionTime": ts}
        )
        status["conditions"] = merged
        try:
            self.k.api.patch(
                f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status",
                {"metadata": {"uid": self.uid}, "status": status},
                "strategic",
            )
        except ApiError as exc:
            # deleted, or a new pod of the same name (its uid differs from ours: 409, or 422
            # where the deleted pod's replacement already exists)
            if exc.code in (404, 409) or (exc.code == 422 and "metadata.uid" in str(exc)):
                self.stopping.set()
                return
            raise
        self.conditions = merged
        self.published = key


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


POD_MARK = "KTRAIN_TEST_POD_UID"


def _kill_marked(mark: str) -> None:
    """SIGKILL every process whose environment carries ``mark``: the pod's processes that
    started sessions of their own or were re-parented (a container runtime ends them all with
    the container's cgroup; this is ours)."""
    needle = mark.encode() + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ or environ.endswith(needle[:-1]):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Kubelet:
    """Registers its nodes, runs the pods bound to them, keeps each pod's /etc/hosts current
    and serves the kubelet API (logs) over TLS on ``port``."""

    def __init__(
        self,
        api: Rest,
        root: Path,
        api_port: int,
        serving: Pair,
        registry: str | None = None,
        pod_ip: str = "127.0.0.1",
        kubectl: Path | None = None,
        host_hosts: Path | None = None,
        shared: Path | None = None,
    ) -> None:
        self.api = api
        # a folder of this machine's /tmp that stays visible in each container's own /tmp
        self.shared = shared
        self.root = root
        self.api_port = api_port
        self.server = KubeletServer(self, serving)
        self.pod_ip = pod_ip
        self.host_hosts = host_hosts  # /etc/hosts of the host-network controllers (KubeRay's)
        self.use_unshare = sandbox.unshare_works()
        # each pod's own network namespace on a bridge, as on a cluster (where we are root;
        # KTRAIN_TEST_POD_NETWORKS=0 turns it off), else this machine's network
        wanted = self.use_unshare and os.environ.get("KTRAIN_TEST_POD_NETWORKS") != "0"
        self.net = netns.Network.create(os.urandom(3).hex()) if wanted else None
        # where pods reach this machine's servers (the API server, controllers' Services)
        self.api_host = pod_ip if self.net is not None else "127.0.0.1"
        self.port = self.server.port
        self.logs = Logs(root / "logs")
        shim = (lambda ref: shim_image(ref, kubectl)) if kubectl is not None else None
        self.puller = Puller(registry, root / "images", shim=shim)
        self.workers: dict[str, PodWorker] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self._asked: dict[str, dict[str, Any]] = {}  # name -> the manifest it was registered with
        # for /etc/hosts: ns -> "kind/name" -> (names, labels or a Service's selector, podIP)
        self.names: dict[str, dict[str, tuple[set[str], dict[str, str] | None, str]]] = {}
        self.pod_objects: dict[str, dict[str, Any]] = {}  # uid -> latest pod object
        self._stalled: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._terminating: set[str] = set()

    # -- what the sandbox asks --------------------------------------------------------------

    def object(self, ns: str, plural: str, name: str) -> dict[str, Any] | None:
        return self.api.try_get(f"/api/v1/namespaces/{ns}/{plural}/{name}")  # type: ignore[no-any-return]

    def token(self, pod: dict[str, Any], audience: str, seconds: int) -> str:
        meta = pod["metadata"]
        sa = pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {
            "expirationSeconds": max(seconds, 600),
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            },
        }
        if audience:
            spec["audiences"] = [audience]
        got = self.api.create(
            f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{sa}/token", {"spec": spec}
        )
        return str(got["status"]["token"])

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        meta = pod["metadata"]
        ts = now()
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": pod["spec"].get("nodeName", "")},
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            self.api.create(f"/api/v1/namespaces/{meta['namespace']}/events", body)

    def write_hosts(self, ns: str, path: Path, own: list[str], own_ip: str = "127.0.0.1") -> None:
        sandbox.hosts_file(self._addresses(), ns, path, own, own_ip if self.net else "127.0.0.1")

    def _addresses(self) -> dict[str, dict[str, str]]:
        """ns -> name -> address: a pod's own IP; a Service's, that of a pod it selects (a
        running one first; the cluster DNS of a headless Service), else this machine's (a
        Service whose endpoints we write: a controller's). Without pod networks, all are
        127.0.0.1, as every pod listens here."""
        with self._lock:
            spaces = {ns: dict(kinds) for ns, kinds in self.names.items()}
        out: dict[str, dict[str, str]] = {}
        for ns, kinds in spaces.items():
            mine = out.setdefault(ns, {})
            pods = sorted((key, v) for key, v in kinds.items() if key.startswith("pod/"))
            for key, (names, _, ip) in kinds.items():
                # a pod with no address yet (or no more) has no name, as in cluster DNS
                if key.startswith("pod/") and (ip or self.net is None):
                    for n in names:
                        mine[n] = ip or self.api_host
            for key, (names, selector, _) in kinds.items():
                if not key.startswith("svc/"):
                    continue
                chosen = [ip for _, (_, labels, ip) in pods
                          if selector and ip and labels is not None
                          and all(labels.get(k) == v for k, v in selector.items())]  # fmt: skip
                for n in names:
                    mine[n] = chosen[0] if chosen else self.api_host
        if self.net is None:
            return {ns: dict.fromkeys(names, "127.0.0.1") for ns, names in out.items()}
        return out

    def exec_target(self, ns: str, name: str, container: str) -> exec_ws.Container | None:
        """The running container ``kubectl exec`` reaches, or None."""
        for w in list(self.workers.values()):
            if w.ns == ns and w.name == name:
                return w.exec_target(container)
        return None

    def pod_for_logs(self, ns: str, name: str) -> dict[str, Any] | None:
        """The pod with its live container statuses (restart counts decide the log file)."""
        for w in list(self.workers.values()):
            if w.ns == ns and w.name == name:
                status = {
                    "containerStatuses": [r.status() for r in w.runs],
                    "initContainerStatuses": [r.status() for r in w.inits],
                }
                return {**w.pod, "status": status}
        return self.object(ns, "pods", name)

    # -- nodes ------------------------------------------------------------------------------

    def set_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Register these Node objects (status included) and forget any other of ours; a node
        registered already as asked is kept. Returns once every new node is schedulable (the
        node lifecycle controller has lifted the ``not-ready`` taint a new node starts with)."""
        wanted = {n["metadata"]["name"]: n for n in nodes}
        for name in list(self.nodes):
            if name not in wanted:
                self.api.delete(f"/api/v1/nodes/{name}")
                self.nodes.pop(name)
        fresh = []
        for name, node in wanted.items():
            node["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.port}}
            if self._asked.get(name) == node and name in self.nodes:
                continue
            self.api.delete(f"/api/v1/nodes/{name}")
            status = node["status"]
            created = self.api.create("/api/v1/nodes", {**node, "status": {}})
            self.api.patch(f"/api/v1/nodes/{name}/status", {"status": status}, "merge")
            self.nodes[name] = created
            self._asked[name] = node
            self._renew_lease(name)
            fresh.append(name)
        deadline = time.monotonic() + 60
        for name in fresh:
            while time.monotonic() < deadline:
                taints = (self.api.get(f"/api/v1/nodes/{name}").get("spec") or {}).get("taints")
                if not any(t["key"].startswith("node.kubernetes.io/") for t in taints or []):
                    break
                time.sleep(0.2)

    def _renew_lease(self, node: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        micro = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        spec = {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": micro}
        try:
            self.api.patch(path, {"spec": spec}, "merge")
        except ApiError as exc:
            if exc.code != 404:
                raise
            self.api.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                {"metadata": {"name": node}, "spec": spec},
            )

    def _heartbeat(self) -> None:
        while not self._stop.wait(5):
            for name in list(self.nodes):
                if name in self._stalled:
                    continue
                with contextlib.suppress(ApiError, OSError):
                    self._renew_lease(name)
                    self._post_ready(name)

    def _post_ready(self, name: str) -> None:
        ts = now()
        cond = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": ts,
        }
        self.api.patch(
            f"/api/v1/nodes/{name}/status", {"status": {"conditions": [cond]}}, "strategic"
        )

    def stalled(self, node: str) -> bool:
        return node in self._stalled

    def stall(self, node: str, stalled: bool) -> None:
        """A stalled node's kubelet stops reporting (status and lease); the real node
        lifecycle controller then marks it NotReady (Unknown) after its grace period."""
        (self._stalled.add if stalled else self._stalled.discard)(node)

    def unstall_all(self) -> None:
        self._stalled.clear()

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

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.server.start()
        for target in (self._watch_pods, self._watch_services, self._watch_claims, self._heartbeat):
            t = threading.Thread(target=target, daemon=True, name=f"kubelet{target.__name__}")
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            self._stop_workers()
        if self.net is not None:
            self.net.close()

    def _stop_workers(self) -> None:
        with self.logs.cond:
            self.logs.closing = True
            self.logs.cond.notify_all()
        self.server.stop()
        workers = list(self.workers.values())
        stoppers = [threading.Thread(target=w.stop, daemon=True) for w in workers]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(15)

    def _watch(self, path: str, on_event: Any) -> None:
        """List, then watch from the list's version; list again after 410 or a closed stream."""
        while not self._stop.is_set():
            try:
                listed = self.api.get(path)
                on_event("SYNC", listed["items"])
                rv = listed["metadata"]["resourceVersion"]
                for ev in self.api.watch(path, rv, timeout=120):
                    if self._stop.is_set():
                        return
                    if ev["type"] == "ERROR":
                        break
                    if ev["type"] == "BOOKMARK":
                        continue
                    on_event(ev["type"], ev["object"])
            except (ApiError, OSError, ValueError):
                if self._stop.wait(0.5):
                    return

    def _watch_claims(self) -> None:
        """The node's storage provisioner: a PersistentVolume (a folder here) for each claim
        that has none, which the real PV controller then binds."""

        def on(typ: str, obj: Any) -> None:
            for pvc in obj if typ == "SYNC" else [obj]:
                if typ != "DELETED" and not (pvc.get("spec") or {}).get("volumeName"):
                    self._provision(pvc)

        self._watch("/api/v1/persistentvolumeclaims", on)

    def _provision(self, pvc: dict[str, Any]) -> None:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        folder = self.root / "pvcs" / meta["namespace"] / meta["name"]
        folder.mkdir(parents=True, exist_ok=True)
        size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
        pv = {
            "metadata": {"name": f"pvc-{meta['uid']}"},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": spec.get("storageClassName") or "",
                "hostPath": {"path": str(folder)},
                "claimRef": {
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        with contextlib.suppress(ApiError):
            self.api.create("/api/v1/persistentvolumes", pv)

    def _watch_services(self) -> None:
        self._watch("/api/v1/services", lambda typ, obj: self._names_event("svc", typ, obj))

    def _watch_pods(self) -> None:
        def on(typ: str, obj: Any) -> None:
            self._names_event("pod", typ, obj)
            for pod in obj if typ == "SYNC" else [obj]:
                self._pod_event("DELETED" if typ == "DELETED" else "MODIFIED", pod)

        self._watch("/api/v1/pods", on)

    def _names_event(self, kind: str, typ: str, obj: Any) -> None:
        objs = obj if typ == "SYNC" else [obj]
        changed: set[str] = set()
        with self._lock:
            if typ == "SYNC":  # a fresh list replaces everything known of this kind
                for per_ns in self.names.values():
                    for key in [k for k in per_ns if k.startswith(f"{kind}/")]:
                        del per_ns[key]
            for o in objs:
                meta = o["metadata"]
                ns = meta["namespace"]
                names = {meta["name"]}
                spec = o.get("spec") or {}
                if kind == "pod" and spec.get("hostname") and spec.get("subdomain"):
                    names.add(f"{spec['hostname']}.{spec['subdomain']}")
                key = f"{kind}/{meta['name']}"
                if typ == "DELETED":
                    self.names.get(ns, {}).pop(key, None)
                else:
                    status = o.get("status") or {}
                    live = status.get("phase") not in ("Succeeded", "Failed")
                    labels = (meta.get("labels") or {}) if kind == "pod" else spec.get("selector")
                    ip = status.get("podIP", "") if kind == "pod" and live else ""
                    self.names.setdefault(ns, {})[key] = (names, labels, ip)
                changed.add(ns)
        for w in list(self.workers.values()):  # names of every namespace resolve in each pod
            if changed and w.hosts.exists():
                self.write_hosts(w.ns, w.hosts, w.own_names, w.ip)
        if changed and self.host_hosts is not None:
            self.write_hosts("", self.host_hosts, ["localhost"])

    def _pod_event(self, typ: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        node = (pod.get("spec") or {}).get("nodeName")
        if typ == "DELETED":
            w = self.workers.pop(uid, None)
            if w is not None:
                threading.Thread(target=w.stop, daemon=True).start()
            return
        if not node or node not in self.nodes:
            return
        if pod["metadata"].get("deletionTimestamp"):
            if uid not in self._terminating:
                self._terminating.add(uid)
                threading.Thread(target=self._terminate, args=(pod,), daemon=True).start()
            return
        phase = (pod.get("status") or {}).get("phase")
        if uid in self.workers or phase in ("Succeeded", "Failed") or self.stalled(node):
            return
        worker = PodWorker(self, pod)
        self.workers[uid] = worker
        worker.start()

    def _terminate(self, pod: dict[str, Any]) -> None:
        """A pod being deleted: stop its containers, then confirm the deletion (grace 0)."""
        meta = pod["metadata"]
        w = self.workers.pop(meta["uid"], None)
        if w is not None:
            w.stop()
            w.report_terminal()
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        with contextlib.suppress(ApiError, OSError):
            self.api.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body)
