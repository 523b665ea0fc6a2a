"""The kubelet's readiness probes against real servers and commands: httpGet (status < 400
ready, a named port), tcpSocket, exec (exit status, timeout), and the thresholds: not ready
before the first success, ready after ``successThreshold`` in a row, unready after
``failureThreshold`` in a row."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.cluster import probes


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/healthz" else 503
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"success" if code == 200 else b"no")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_port():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _attempt(probe, container=None):
    container = container or {"name": "c"}
    run = probes.attempt(probe, container, "127.0.0.1", lambda cmd: cmd, {"PATH": "/usr/bin:/bin"})
    assert run is not None
    return run


def test_http_tcp_and_exec_attempts(http_port):
    named = {"name": "c", "ports": [{"name": "agent", "containerPort": http_port}]}
    assert _attempt({"httpGet": {"path": "/healthz", "port": "agent"}}, named)(1)
    assert not _attempt({"httpGet": {"path": "/other", "port": http_port}})(1)
    assert _attempt({"tcpSocket": {"port": http_port}})(1)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert not _attempt({"tcpSocket": {"port": free}})(1)
    assert not _attempt({"httpGet": {"path": "/healthz", "port": free}})(1)
    assert _attempt({"exec": {"command": ["sh", "-c", "exit 0"]}})(1)
    assert not _attempt({"exec": {"command": ["sh", "-c", "exit 1"]}})(1)
    started = time.monotonic()
    assert not _attempt({"exec": {"command": ["sleep", "30"]}})(0.3)  # timeoutSeconds holds
    assert time.monotonic() - started < 5
    assert probes.attempt({"grpc": {"port": 1}}, {"name": "c"}, "h", list, {}) is None
    with pytest.raises(ValueError, match="names no port"):
        _attempt({"tcpSocket": {"port": "missing"}})


def _until(pred, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_thresholds_and_period():
    results = iter([True, True, False, False, True])
    calls: list[float] = []

    def attempt(timeout: float) -> bool:
        calls.append(time.monotonic())
        return next(results)

    probe = {"periodSeconds": 0.05, "successThreshold": 2, "failureThreshold": 2}
    prober = probes.Prober(probe, attempt)
    states = []

    def step(n: int) -> None:  # the pod's loop ticks until the n-th attempt is in
        while len(calls) < n or prober._busy:
            prober.tick()
            time.sleep(0.005)
        states.append(prober.ready)

    assert not prober.ready  # not ready before any probe
    for n in range(1, 6):
        step(n)
    assert states == [False, True, True, False, False]
    # one attempt per periodSeconds: the kubelet's prober ticks at a fixed rate, so an attempt
    # that starts late (a busy machine) may be followed sooner; on average never faster
    assert (calls[-1] - calls[0]) / (len(calls) - 1) >= 0.045


def test_initial_delay():
    calls: list[float] = []
    prober = probes.Prober({"initialDelaySeconds": 0.3}, lambda t: calls.append(t) or True)
    start = time.monotonic()
    while not prober.ready:
        prober.tick()
        time.sleep(0.01)
        assert time.monotonic() - start < 5
    assert time.monotonic() - start >= 0.3
    assert calls == [1.0]  # timeoutSeconds defaults to 1, as the API server defaults it
