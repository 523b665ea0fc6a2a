"""The test kubelet's exec over WebSocket (``tests/cluster/exec_ws.py``), served by a tiny TLS
server and driven by a real WebSocket client (``websocket-client``) the way ``kubectl exec``
speaks to a kubelet: v5.channel.k8s.io, a binary frame per message whose first byte is the
channel, the exit status as JSON on channel 3, then a normal closure."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from tests.cluster import exec_ws

websocket = pytest.importorskip("websocket")

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"


class Server:
    """TLS on 127.0.0.1; every GET /exec/... runs in ``self.container``."""

    def __init__(self, tmp: Path, serve: Callable[..., None] = exec_ws.serve) -> None:
        self.cert, key = tmp / "cert.pem", tmp / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-keyout", str(key), "-out", str(self.cert), "-days", "1",
             "-subj", "/CN=kubelet", "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.container = exec_ws.Container(env={"PATH": os.environ["PATH"]}, cwd=str(tmp))
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                request = exec_ws.parse_query(parse_qsl(url.query))
                serve(self.connection, self.headers.items(), request, outer.container)
                self.close_connection = True

            do_POST = do_GET  # SPDY upgrades are POSTs

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def connect(self, command: list[str], protocols: list[str] | None = None,
                stdin: bool = False) -> Any:  # fmt: skip
        query = [("command", c) for c in command] + [("output", "1"), ("error", "1")]
        if stdin:
            query.append(("input", "1"))
        url = f"wss://127.0.0.1:{self.port}/exec/ns/pod/main?{urlencode(query)}"
        return websocket.create_connection(
            url, subprotocols=protocols or [V5, V4], sslopt={"ca_certs": str(self.cert)},
            timeout=30,
        )  # fmt: skip

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()


def collect(ws: Any) -> tuple[dict[int, bytes], int | None]:
    """Every channel's bytes until the server closes; and the close code."""
    out: dict[int, bytes] = {}
    try:
        while True:
            opcode, frame = ws.recv_data_frame(control_frame=True)
            if opcode == websocket.ABNF.OPCODE_CLOSE:
                code = int.from_bytes(frame.data[:2], "big") if len(frame.data) >= 2 else None
                return out, code
            if opcode == websocket.ABNF.OPCODE_BINARY:
                out[frame.data[0]] = out.get(frame.data[0], b"") + frame.data[1:]
    finally:
        ws.shutdown()


def test_output_channels_and_a_non_zero_exit_code(server: Server) -> None:
    ws = server.connect(["sh", "-c", "echo out; echo err >&2; echo $PWD; exit 3"])
    assert ws.subprotocol == V5
    channels, code = collect(ws)
    assert channels[1] == f"out\n{server.cert.parent}\n".encode()
    assert channels[2] == b"err\n"
    status = json.loads(channels[3])
    assert status["status"] == "Failure"
    assert status["reason"] == "NonZeroExitCode"  # what client-go turns into exit code 3
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert code == 1000


def test_stdin_until_the_v5_close_signal_and_success(server: Server) -> None:
    ws = server.connect(["sh", "-c", "tr a-z A-Z; echo end"], stdin=True)
    ws.send_binary(b"\x00hello ")
    ws.send_binary(b"\x00world\n")
    ws.send_binary(bytes([255, 0]))  # v5: stdin is closed
    channels, code = collect(ws)
    assert channels[1] == b"HELLO WORLD\nend\n"
    assert json.loads(channels[3]) == {"metadata": {}, "status": "Success"}
    assert code == 1000


def test_v4_when_the_client_offers_no_v5(server: Server) -> None:
    ws = server.connect(["echo", "four"], protocols=[V4])
    assert ws.subprotocol == V4
    channels, _ = collect(ws)
    assert channels[1] == b"four\n"
    assert json.loads(channels[3])["status"] == "Success"


def test_an_unknown_subprotocol_is_refused(server: Server) -> None:
    with pytest.raises(websocket.WebSocketBadStatusException) as err:
        server.connect(["true"], protocols=["channel.k8s.io"])
    assert err.value.status_code == 403


def test_pings_get_pongs_while_the_command_runs(server: Server) -> None:
    """client-go pings every 5 s and drops the connection after 61 s without a pong."""
    ws = server.connect(["sh", "-c", "sleep 0.5; echo done"])
    ws.ping(b"heartbeat")
    while True:
        opcode, frame = ws.recv_data_frame(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_PONG:
            assert frame.data == b"heartbeat"
            break
    channels, code = collect(ws)
    assert channels[1] == b"done\n"
    assert code == 1000


def test_a_command_that_cannot_start_is_a_failure_status(server: Server) -> None:
    channels, code = collect(server.connect(["/no/such/program"]))
    status = json.loads(channels[3])
    assert status["status"] == "Failure"
    assert "/no/such/program" in status["message"]
    assert code == 1000


def test_the_command_ends_when_the_client_goes_away(server: Server) -> None:
    ws = server.connect(["sh", "-c", "echo $$; exec sleep 60"])
    pid = b""
    while not pid.endswith(b"\n"):
        _opcode, data = ws.recv_data(control_frame=False)
        if data[:1] == b"\x01":
            pid += data[1:]
    ws.shutdown()  # no close frame: the connection just drops
    deadline = time.monotonic() + 10
    while _alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(int(pid))


def test_the_kubelet_is_told_each_command_it_must_end_with_the_container(
    server: Server,
) -> None:
    started: list[subprocess.Popen[bytes]] = []
    server.container = exec_ws.Container(env={"PATH": os.environ["PATH"]}, started=started.append)
    ws = server.connect(["sh", "-c", "echo $$; exec sleep 60"])
    pid = b""
    while not pid.endswith(b"\n"):
        _opcode, data = ws.recv_data(control_frame=False)
        if data[:1] == b"\x01":
            pid += data[1:]
    assert [p.pid for p in started] == [int(pid)]
    os.killpg(started[0].pid, signal.SIGKILL)  # as the kubelet does when the container stops
    channels, code = collect(ws)
    assert json.loads(channels[3])["details"]["causes"] == [
        {"reason": "ExitCode", "message": "137"}
    ]
    assert code == 1000


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nsenter") is None or shutil.which("unshare") is None,
    reason="needs root, unshare and nsenter (util-linux)",
)
def test_the_command_sees_the_containers_mounts(server: Server, tmp_path: Path) -> None:
    """A container process with a private bind mount; exec enters its mount namespace."""
    volume, mount_point = tmp_path / "volume", tmp_path / "data"
    volume.mkdir()
    mount_point.mkdir()
    (volume / "only-in-the-pod").write_text("mounted\n")
    script = f"mount --bind {volume} {mount_point} && exec sleep 60"
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script])
    try:
        deadline = time.monotonic() + 10
        while not _mounted(proc.pid, str(mount_point)) and time.monotonic() < deadline:
            time.sleep(0.05)
        server.container = exec_ws.Container(env={"PATH": os.environ["PATH"]},
                                             cwd=str(mount_point), pid=proc.pid)  # fmt: skip
        channels, _ = collect(server.connect(["cat", "only-in-the-pod"]))
        assert channels[1] == b"mounted\n"  # relative path: the command runs in the pod's cwd
        assert json.loads(channels[3])["status"] == "Success"
        assert not (mount_point / "only-in-the-pod").exists()  # not on the host
    finally:
        proc.kill()
        proc.wait()


def _mounted(pid: int, path: str) -> bool:
    with open(f"/proc/{pid}/mountinfo") as fh:
        return any(line.split()[4] == path for line in fh)


def test_large_output_arrives_whole(server: Server) -> None:
    script = "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done"
    channels, _ = collect(server.connect(["sh", "-c", script]))
    assert channels[1].decode().splitlines() == [f"line-{i}" for i in range(20000)]
    assert json.loads(channels[3])["status"] == "Success"
