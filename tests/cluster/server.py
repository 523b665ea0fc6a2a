"""HTTP edge of the API server: bearer-token auth, fault injection, JSON and chunked streams."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from . import errors
from .api import Api, Response
from .errors import ApiError

if TYPE_CHECKING:
    from .faults import Faults


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up mid-stream (a closed watch or log follow) is normal."""
        import sys

        if isinstance(sys.exc_info()[1], ssl.SSLEOFError | ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class ApiServer:
    """Serves ``api`` on 127.0.0.1:port (0 = a free port) in a background thread."""

    def __init__(
        self, api: Api, token: str, faults: Faults, port: int = 0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.api = api
        self.token = token
        self.faults = faults
        handler = type("Handler", (_Handler,), {"owner": self})
        self.httpd = _Server(("127.0.0.1", port), handler)
        self.port = self.httpd.server_address[1]
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        api.address = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: ApiServer
    protocol_version = "HTTP/1.1"
    server_version = "ktrain-test-apiserver"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        for key in ("watch", "allowWatchBookmarks", "follow", "previous", "timestamps"):
            if key in query:  # Go parses booleans case-insensitively; the Python client sends True
                query[key] = "true" if query[key].lower() in ("true", "1", "t") else "false"
        headers = {k.lower(): v for k, v in self.headers.items()}
        length = int(headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if headers.get("authorization") != f"Bearer {self.owner.token}":
                raise errors.unauthorized()
            self.owner.faults.before_request(method, url.path)
            resp = self.owner.api.handle(method, url.path, query, headers, body)
        except ApiError as exc:
            resp = Response(exc.code, exc.status(), headers=exc.headers)
        except Exception as exc:  # a bug here must still answer like a server
            resp = Response(500, errors.internal(repr(exc)).status())
        try:
            if resp.stream is not None:
                self._stream(resp)
            else:
                self._send(resp)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send(self, resp: Response) -> None:
        data = resp.body.encode() if isinstance(resp.body, str) else json.dumps(resp.body).encode()
        self.send_response(resp.code)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, resp: Response) -> None:
        assert resp.stream is not None
        stream = iter(resp.stream)
        self.send_response(resp.code)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            for data in stream:
                self._chunk(data)
        finally:
            close = getattr(stream, "close", None)
            if close:
                close()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
