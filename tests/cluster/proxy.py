"""A TLS proxy in front of the real API server, where the tests' faults are injected: clients
(kubectl, the Python client, the product) talk to it; it forwards every request unchanged,
streams responses (watches, log follows) as they come, tunnels upgraded connections (exec),
and on command answers the next requests with 429/5xx, ends open watches, expires resource
versions (410 Gone) or cuts open log streams. Controllers talk to the API server directly."""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .pki import Pair

HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
}


@dataclass
class _Failure:
    remaining: int
    status: int
    path: str | None
    method: str | None
    retry_after: int


@dataclass(eq=False)
class _Stream:
    path: str
    upstream: http.client.HTTPSConnection
    kind: str  # "watch" | "log"
    closed: threading.Event = field(default_factory=threading.Event)

    def cut(self) -> None:
        self.closed.set()
        with contextlib.suppress(OSError):
            if self.upstream.sock is not None:
                self.upstream.sock.shutdown(socket.SHUT_RDWR)


class FaultProxy:
    def __init__(self, upstream_port: int, ca: str, pair: Pair) -> None:
        self.upstream_port = upstream_port
        self.upstream_ctx = ssl.create_default_context(cafile=ca)
        self._lock = threading.Lock()
        self._failures: list[_Failure] = []
        self._streams: set[_Stream] = set()
        self._expired_rv = 0
        self.requests = 0  # every request a client made (benchmarks count API traffic)
        handler = type("Handler", (_Handler,), {"proxy": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pair.cert), str(pair.key))
        ctx.set_alpn_protocols(["http/1.1"])
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.cut(lambda s: True)
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self.httpd.shutdown()
        self.httpd.server_close()

    # -- faults -----------------------------------------------------------------------------

    def fail_next(
        self, n: int, status: int, path: str | None, method: str | None, retry_after: int
    ) -> None:
        with self._lock:
            self._failures.append(_Failure(n, status, path, method, retry_after))

    def take_failure(self, method: str, path: str) -> _Failure | None:
        with self._lock:
            self.requests += 1
            for f in self._failures:
                if (
                    f.remaining > 0
                    and (f.path is None or f.path in path)
                    and (f.method is None or f.method == method)
                ):
                    f.remaining -= 1
                    self._failures = [x for x in self._failures if x.remaining > 0]
                    return f
        return None

    def expire(self, resource_version: int) -> None:
        """Watches from any version up to this one get 410 Gone (as after compaction)."""
        with self._lock:
            self._expired_rv = max(self._expired_rv, resource_version)
        self.cut(lambda s: s.kind == "watch")

    def expired(self, rv: str) -> bool:
        with self._lock:
            return bool(rv.isdigit() and 0 < int(rv) <= self._expired_rv)

    def cut(self, which: Any) -> None:
        with self._lock:
            streams = [s for s in self._streams if which(s)]
        for s in streams:
            s.cut()

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
            self._expired_rv = 0

    def track(self, stream: _Stream, on: bool) -> None:
        with self._lock:
            (self._streams.add if on else self._streams.discard)(stream)


def status_body(code: int, reason: str, message: str) -> bytes:
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    proxy: FaultProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        failure = self.proxy.take_failure(self.command, url.path)
        if failure is not None:
            if failure.status == 429:
                msg = "Too many requests, please try again later."
                self._send(
                    429,
                    status_body(429, "TooManyRequests", msg),
                    {"Retry-After": str(failure.retry_after)},
                )
            else:
                code = failure.status
                self._send(code, status_body(code, "InternalError", "injected fault"))
            return
        watch = query.get("watch", [""])[0].lower() in ("1", "true")
        follow = query.get("follow", [""])[0].lower() in ("1", "true")
        if watch and self.proxy.expired(query.get("resourceVersion", [""])[0]):
            self._expired_watch()
            return
        if self.headers.get("Upgrade"):
            self._tunnel(body)
            return
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.proxy.upstream_port, context=self.proxy.upstream_ctx, timeout=3600
        )
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
        except OSError as exc:
            self._send(502, status_body(502, "ServiceUnavailable", f"upstream: {exc}"))
            conn.close()
            return
        stream = None
        if watch or (follow and url.path.endswith("/log")):
            stream = _Stream(url.path, conn, "watch" if watch else "log")
            self.proxy.track(stream, True)
        try:
            self._relay(resp, stream)
        finally:
            if stream is not None:
                self.proxy.track(stream, False)
            conn.close()

    def _relay(self, resp: http.client.HTTPResponse, stream: _Stream | None) -> None:
        self.send_response_only(resp.status, resp.reason)
        bodiless = resp.status in (204, 304) or 100 <= resp.status < 200 or self.command == "HEAD"
        for k, v in resp.getheaders():
            if k.lower() not in HOP and k.lower() != "content-length":
                self.send_header(k, v)
        if bodiless:  # RFC 9112 6.3: no body, so no Transfer-Encoding (kubectl refuses one)
            self.end_headers()
            self.wfile.flush()
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            while True:
                try:
                    chunk = resp.read1(65536)  # what has come, at once (watches, follows)
                except (OSError, http.client.HTTPException):
                    chunk = b""
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")  # a cut stream ends cleanly, as the server ends it
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    def _expired_watch(self) -> None:
        event = {
            "type": "ERROR",
            "object": json.loads(status_body(410, "Expired", "too old resource version")),
        }
        body = json.dumps(event).encode() + b"\n"
        self._send(200, body)

    def _tunnel(self, body: bytes | None) -> None:
        """An upgraded connection (exec, attach, port-forward): pipe bytes both ways."""
        up = self.proxy.upstream_ctx.wrap_socket(
            socket.create_connection(("127.0.0.1", self.proxy.upstream_port)),
            server_hostname="127.0.0.1",
        )
        head = f"{self.command} {self.path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in self.headers.items()
        )
        up.sendall(head.encode() + b"\r\n" + (body or b""))
        client = self.connection
        self.close_connection = True
        socks = [client, up]
        try:
            while True:
                ready, _, _ = select.select(socks, [], [], 3600)
                if not ready:
                    break
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    (up if s is client else client).sendall(data)
        except (OSError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                up.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward
