"""The kubelet API over TLS, as far as the real API server uses it here: ``/containerLogs``
(what ``kubectl logs`` and every log client reach through ``pods/log``), ``/exec`` (kubectl exec:
WebSocket, proxied as it comes because our Nodes declare ExtendWebSocketsToKubelet, see
``exec_ws.py``; or SPDY, kubectl's fallback, see ``exec_spdy.py``) and ``/healthz``.
Logs stream with chunked transfer encoding until the container's log ends."""

from __future__ import annotations

import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from . import exec_spdy, exec_ws
from .logs import LogError
from .pki import Pair

if TYPE_CHECKING:
    from .kubelet import Kubelet


class KubeletServer:
    def __init__(self, kubelet: Kubelet, pair: Pair) -> None:
        self.kubelet = kubelet
        handler = type("Handler", (_Handler,), {"kubelet": kubelet})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pair.cert), str(pair.key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():  # shutdown() waits for a serve_forever that never ran
            self.httpd.shutdown()
        self.httpd.server_close()


# the real kubelet's server closes a kept-alive connection idle this long (its http.Server's
# IdleTimeout, "matches http.DefaultTransport keep-alive timeout"); without it each idle
# connection the API server keeps would hold a thread and a socket here for good
IDLE_TIMEOUT_S = 90.0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kubelet: Kubelet

    def handle_one_request(self) -> None:
        # waiting for the next request on a kept-alive connection: at most IDLE_TIMEOUT_S (a
        # timeout there ends the connection); a request's own streams have no limit
        self.connection.settimeout(IDLE_TIMEOUT_S)
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.connection.settimeout(None)
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _text(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        """exec over SPDY/3.1: what kubectl falls back to when its WebSocket GET is refused
        (the MPI launcher's Role has only ``create`` on pods/exec)."""
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if len(parts) == 4 and parts[0] == "exec":
            self._exec(parts[1], parts[2], parts[3], url.query, spdy=True)
            return
        self.close_connection = True
        self._text(404, "404 page not found")

    def _exec(self, ns: str, name: str, container: str, query: str, spdy: bool = False) -> None:
        target = self.kubelet.exec_target(ns, name, container)
        self.close_connection = True  # the connection becomes the stream, or ends here
        if target is None:
            self._text(404, f'container "{container}" in pod "{name}" is not running')
            return
        request = exec_ws.parse_query(parse_qsl(query, keep_blank_values=True))
        serve = exec_spdy.serve if spdy else exec_ws.serve
        serve(self.connection, self.headers.items(), request, target)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts == ["healthz"]:
            self._text(200, "ok")
            return
        if len(parts) == 4 and parts[0] == "exec":
            self._exec(parts[1], parts[2], parts[3], url.query)
            return
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._text(404, "404 page not found")
            return
        _, ns, name, container = parts
        query = dict(parse_qsl(url.query))
        found = self.kubelet.pod_for_logs(ns, name)
        if found is None:
            self._text(404, f'pod "{name}" not found')
            return
        try:
            lines = self.kubelet.logs.serve(found, container, query)
        except LogError as exc:
            self._text(400, str(exc))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for line in lines:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True
