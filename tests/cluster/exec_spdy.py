"""``exec`` over SPDY/3.1, as the kubelet serves it: what ``kubectl exec`` falls back to when
its WebSocket upgrade is refused. That is what an MPIJob's launcher does: the Kubeflow v1 MPI
controller's Role grants ``create`` on ``pods/exec`` only, a WebSocket upgrade is a GET (verb
``get``), the API server answers 403 and kubectl (1.37) retries over SPDY (a POST: ``create``).

The protocol (``k8s.io/streaming/pkg/httpstream/spdy``, ``github.com/moby/spdystream``,
``k8s.io/client-go/tools/remotecommand`` v4):

- ``POST`` with ``Upgrade: SPDY/3.1`` and ``X-Stream-Protocol-Version`` values; the answer is
  101 with the first offered version this side serves (``v4.channel.k8s.io``), else 403.
- The client opens one stream per channel (SYN_STREAM, header ``streamtype``: ``error``,
  ``stdin``, ``stdout``, ``stderr``, ``resize``) and waits for each SYN_REPLY. Header blocks
  are zlib streams (one per direction, SPDY/3's dictionary).
- DATA frames carry the bytes; FIN ends a stream (stdin's FIN is EOF). At exit the ``error``
  stream carries the status JSON (as in ``exec_ws.status_json``) and every stream gets FIN.
- PING frames are echoed.

One thread serves a connection, as in ``exec_ws``. Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .exec_ws import (
    DRAIN_IDLE_S,
    Container,
    ExecRequest,
    _Closed,
    _feed_stdin,
    _start,
    recv_exact,
    status_json,
)

__all__ = ["PROTOCOLS", "serve"]

PROTOCOLS = ("v4.channel.k8s.io",)
_SYN_STREAM, _SYN_REPLY, _RST, _SETTINGS, _PING, _GOAWAY = 1, 2, 3, 4, 6, 7
_FIN = 0x01
_CHUNK = 32768
_WAIT_STREAMS_S = 30.0

# SPDY/3's header compression dictionary (draft-mbelshe-httpbis-spdy-00, 2.6.10.1): these
# words, each with a 4-byte length, then the text below as it is.
_WORDS = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
]
_WORDS += ["200 OK", "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin"]
_TAIL = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504"
    "505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, "
    "Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
    "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
    "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
DICTIONARY = b"".join(struct.pack("!I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()


def handshake(pairs: Iterable[tuple[str, str]]) -> tuple[int, bytes]:
    """(status, response bytes) for the upgrade request's headers."""
    offered: list[str] = []
    upgrade = connection = ""
    for key, value in pairs:
        k = key.lower()
        if k == "x-stream-protocol-version":
            offered += [v.strip() for v in value.split(",")]
        elif k == "upgrade":
            upgrade = value.lower()
        elif k == "connection":
            connection = value.lower()
    if "upgrade" not in connection or "spdy/3.1" not in upgrade:
        return 400, _plain(400, "Bad Request", "unable to upgrade: missing upgrade headers")
    chosen = next((p for p in offered if p in PROTOCOLS), None)
    if chosen is None:
        text = f"unable to upgrade: unable to negotiate protocol: client supports {offered}, "
        return 403, _plain(403, "Forbidden", text + f"server supports {list(PROTOCOLS)}")
    head = ("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            f"X-Stream-Protocol-Version: {chosen}\r\n\r\n")  # fmt: skip
    return 101, head.encode()


def _plain(code: int, reason: str, text: str) -> bytes:
    body = text.encode()
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


def control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack("!HHI", 0x8003, kind, (flags << 24) | len(payload)) + payload


def data(stream: int, flags: int, payload: bytes) -> bytes:
    return struct.pack("!II", stream & 0x7FFFFFFF, (flags << 24) | len(payload)) + payload


def header_block(headers: dict[str, str]) -> bytes:
    out = struct.pack("!I", len(headers))
    for k, v in headers.items():
        out += struct.pack("!I", len(k)) + k.encode() + struct.pack("!I", len(v)) + v.encode()
    return out


def parse_header_block(raw: bytes) -> dict[str, str]:
    (count,) = struct.unpack_from("!I", raw)
    pos, out = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from("!I", raw, pos)
        name = raw[pos + 4 : pos + 4 + n].decode()
        pos += 4 + n
        (n,) = struct.unpack_from("!I", raw, pos)
        out[name.lower()] = raw[pos + 4 : pos + 4 + n].decode()
        pos += 4 + n
    return out


@dataclass
class _Session:
    sock: socket.socket
    request: ExecRequest
    streams: dict[str, int] = field(default_factory=dict)  # streamtype -> stream id
    stdin_q: queue.Queue[bytes | None] = field(default_factory=queue.Queue)
    inflate: Any = field(default_factory=lambda: zlib.decompressobj(zdict=DICTIONARY))
    deflate: Any = field(default_factory=lambda: zlib.compressobj(9, zdict=DICTIONARY))
    stdin_done: bool = False

    def send(self, frame: bytes) -> None:
        try:
            self.sock.sendall(frame)
        except OSError as exc:
            raise _Closed from exc

    def _recv_exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def readable(self) -> bool:
        pending = getattr(self.sock, "pending", None)
        return bool(pending and pending() > 0)

    def on_readable(self) -> None:
        """Handle one frame from the client."""
        first, second = struct.unpack("!II", self._recv_exact(8))
        flags, length = second >> 24, second & 0xFFFFFF
        payload = self._recv_exact(length)
        if not first & 0x80000000:
            self.on_data(first & 0x7FFFFFFF, flags, payload)
            return
        kind = first & 0xFFFF
        if kind == _SYN_STREAM:
            stream = struct.unpack_from("!I", payload)[0] & 0x7FFFFFFF
            headers = parse_header_block(self.inflate.decompress(payload[10:]))
            self.streams[headers.get("streamtype", "")] = stream
            reply = self.deflate.compress(header_block({})) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
            self.send(control(_SYN_REPLY, 0, struct.pack("!I", stream) + reply))
            if flags & _FIN and headers.get("streamtype") == "stdin":
                self.end_stdin()
        elif kind == _PING:
            self.send(control(_PING, 0, payload))
        elif kind == _GOAWAY or (
            kind == _RST and struct.unpack_from("!I", payload)[0] == self.streams.get("error")
        ):
            raise _Closed
        # SETTINGS, WINDOW_UPDATE, HEADERS: nothing to do here

    def on_data(self, stream: int, flags: int, payload: bytes) -> None:
        if stream == self.streams.get("stdin"):
            if payload:
                self.stdin_q.put(payload)
            if flags & _FIN:
                self.end_stdin()

    def end_stdin(self) -> None:
        if not self.stdin_done:
            self.stdin_done = True
            self.stdin_q.put(None)

    def expected(self) -> set[str]:
        req = self.request
        wanted = (("stdin", req.stdin), ("stdout", req.stdout), ("stderr", req.stderr),
                  ("resize", req.tty))  # fmt: skip
        return {"error"} | {name for name, on in wanted if on}


def serve(
    sock: socket.socket, headers: Iterable[tuple[str, str]], request: ExecRequest,
    container: Container,
) -> None:  # fmt: skip
    """Answer one SPDY exec upgrade on ``sock`` and run the command to its end."""
    status, response = handshake(headers)
    try:
        sock.sendall(response)
    except OSError:
        return
    if status != 101:
        return
    s = _Session(sock, request)
    proc: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + _WAIT_STREAMS_S
        while not s.expected() <= set(s.streams) and time.monotonic() < deadline:
            if s.readable() or select.select([sock], [], [], 0.2)[0]:
                s.on_readable()
        if not request.command:
            _end(s, status_json(None, "you must specify at least one command"))
            return
        try:
            proc = _start(container, request)
        except OSError as exc:
            _end(s, status_json(None, f"failed to exec in container: {exc}"))
            return
        if container.started is not None:
            container.started(proc)
        if request.stdin:
            threading.Thread(target=_feed_stdin, args=(proc, s.stdin_q), daemon=True).start()
        pipes = {p.fileno(): n for p, n in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))
                 if p is not None}  # fmt: skip
        _pump(s, proc, pipes)
        rc = proc.wait()
        _end(s, status_json(128 - rc if rc < 0 else rc))
    except _Closed:
        pass
    finally:
        s.end_stdin()
        _stop(proc)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _pump(s: _Session, proc: subprocess.Popen[bytes], pipes: dict[int, str]) -> None:
    idle_since: float | None = None
    while pipes:
        if s.readable():
            s.on_readable()
            continue
        sock_fd = s.sock.fileno()
        ready, _, _ = select.select([sock_fd, *pipes], [], [], 0.2)
        for fd in ready:
            if fd == sock_fd:
                s.on_readable()
                continue
            chunk = os.read(fd, _CHUNK)
            if chunk and pipes[fd] in s.streams:
                s.send(data(s.streams[pipes[fd]], 0, chunk))
            elif not chunk:
                pipes.pop(fd)
        if proc.poll() is None or ready:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > DRAIN_IDLE_S:
            return


def _end(s: _Session, status: bytes) -> None:
    """The status on the error stream, FIN on every stream, then GOAWAY."""
    if "error" in s.streams:
        s.send(data(s.streams["error"], _FIN, status))
    for name in ("stdout", "stderr"):
        if name in s.streams:
            s.send(data(s.streams[name], _FIN, b""))
    last = max(s.streams.values(), default=0)
    s.send(control(_GOAWAY, 0, struct.pack("!II", last, 0)))


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    if proc.poll() is None:  # the client went away: so does the command
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
