"""Readiness probes, as the kubelet's prober runs them: ``exec`` in the container (its
namespaces and env, as ``kubectl exec``), ``httpGet`` and ``tcpSocket`` from the node to the
pod's address (a named port is the container's port of that name). The first attempt comes
after ``initialDelaySeconds``, then one every ``periodSeconds``, each bounded by
``timeoutSeconds``; a container starts not ready, turns ready after ``successThreshold``
successes in a row and back after ``failureThreshold`` failures in a row. ``grpc`` probes are
not run here: such a container reads ready once running, as if it had no probe.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Prober"]


class Prober:
    """One container start's readiness: :meth:`tick` from the pod's loop starts an attempt
    when one is due (in a thread of its own, so a slow probe holds up nothing else)."""

    def __init__(self, probe: dict[str, Any], attempt: Callable[[float], bool]) -> None:
        self.attempt = attempt
        self.timeout = float(probe.get("timeoutSeconds") or 1)
        self.period = float(probe.get("periodSeconds") or 10)
        self.to_ready = int(probe.get("successThreshold") or 1)
        self.to_unready = int(probe.get("failureThreshold") or 3)
        self.next = time.monotonic() + float(probe.get("initialDelaySeconds") or 0)
        self.ready = False
        self._run = 0  # successes (> 0) or failures (< 0) in a row
        self._busy = False
        self._lock = threading.Lock()

    def tick(self) -> None:
        with self._lock:
            if self._busy or time.monotonic() < self.next:
                return
            self._busy = True
            self.next = time.monotonic() + self.period
        threading.Thread(target=self._probe, daemon=True, name="readiness-probe").start()

    def _probe(self) -> None:
        try:
            ok = self.attempt(self.timeout)
        except Exception:
            ok = False
        with self._lock:
            self._run = max(self._run, 0) + 1 if ok else min(self._run, 0) - 1
            if ok and self._run >= self.to_ready:
                self.ready = True
            elif not ok and -self._run >= self.to_unready:
                self.ready = False
            self._busy = False


def attempt(
    probe: dict[str, Any],
    container: dict[str, Any],
    host: str,
    exec_argv: Callable[[list[str]], list[str]],
    env: Mapping[str, str],
) -> Callable[[float], bool] | None:
    """The probe's one attempt, given its timeout; None for a kind not run here (grpc)."""
    if "exec" in probe:
        command = [str(a) for a in probe["exec"].get("command") or []]
        return lambda timeout: _exec(exec_argv(command), env, timeout)
    for kind in ("httpGet", "tcpSocket"):
        if kind in probe:
            action = probe[kind]
            port = _port(action.get("port"), container)
            where = action.get("host") or host
            if kind == "tcpSocket":
                return lambda timeout: _tcp(where, port, timeout)
            scheme = str(action.get("scheme") or "HTTP").lower()
            path = str(action.get("path") or "/")
            url = f"{scheme}://{where}:{port}{path if path.startswith('/') else '/' + path}"
            headers = {h["name"]: h["value"] for h in action.get("httpHeaders") or []}
            return lambda timeout: _http(url, headers, timeout)
    return None


def _port(port: Any, container: dict[str, Any]) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"probe port {port!r} names no port of container {container.get('name')}")


def _exec(argv: list[str], env: Mapping[str, str], timeout: float) -> bool:
    proc = subprocess.Popen(
        argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        return proc.wait(timeout) == 0
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def _tcp(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _http(url: str, headers: dict[str, str], timeout: float) -> bool:
    req = urllib.request.Request(url, headers={"User-Agent": "kube-probe/1.37", **headers})
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # as the kubelet: not verified
    # straight to the pod, as the kubelet (no proxy of this machine's environment)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
    )
    try:
        with opener.open(req, timeout=timeout) as resp:
            return 200 <= int(resp.status) < 400
    except urllib.error.HTTPError as exc:
        exc.close()
        return 200 <= exc.code < 400
    except (OSError, ValueError):
        return False
