"""``exec`` over WebSocket, as the kubelet serves it: what ``kubectl exec`` (1.37: WebSocket,
subprotocol ``v5.channel.k8s.io``) reaches through the real API server, which proxies the
upgrade straight to the kubelet when the Node declares ``ExtendWebSocketsToKubelet``.

Path and query as the API server builds them (``pod.ExecLocation``)::

    GET /exec/{namespace}/{pod}/{container}?command=sh&command=-c&command=...&output=1&error=1

(``input=1`` with stdin; ``stdin``/``stdout``/``stderr`` are accepted as well.) The protocol, from
``k8s.io/streaming/pkg/httpstream/wsstream`` and ``k8s.io/client-go/tools/remotecommand``:

- RFC 6455 handshake; the subprotocol is ``v5.channel.k8s.io`` when offered, else
  ``v4.channel.k8s.io``; anything else is refused (403, as the Go WebSocket server does).
- Every message is a binary frame whose first byte is the channel: 0 stdin (client to
  server), 1 stdout, 2 stderr, 3 the status (JSON ``metav1.Status``), 4 terminal resize
  (ignored: no TTY here). v5 adds ``[255, N]`` from the client: channel N is closed (stdin EOF).
- Right after the handshake an empty message goes to the lowest requested output channel.
- At exit: channel 3 carries ``{"status": "Success"}``, or ``Failure`` with reason
  ``NonZeroExitCode`` and ``details.causes[{"reason": "ExitCode", "message": "<code>"}]``;
  then a close frame with code 1000 (a normal closure: the client's readers see EOF).
- Pings are answered with pongs: client-go pings every 5 s and gives up after 61 s without a
  pong, which would cut any longer command (an MPI daemon lives as long as the job).

One thread serves a connection (``select`` over the socket and the command's pipes): a TLS
socket is never read and written from two threads at once. Standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PROTOCOLS", "Container", "ExecRequest", "command_argv", "parse_query", "serve"]

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")  # preferred first
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
STDIN, STDOUT, STDERR, STATUS, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
_CONT, _TEXT, _BINARY, _CLOSE_OP, _PING, _PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_CHUNK = 32768
DRAIN_IDLE_S = 1.0  # after exit: output a background child still holds open is waited this long


@dataclass(frozen=True)
class Container:
    """Where the command runs: the container's env and working directory; ``pid`` is a process
    of the container whose mount, network and UTS namespaces the command enters (``nsenter -t
    PID -m -n -u``; None where the kubelet runs containers without them). ``started`` is told
    the command's process (its own process group): the kubelet ends it with the container, as a
    runtime ends every process of a container that stops."""

    env: Mapping[str, str]
    cwd: str = "/"
    pid: int | None = None
    started: Callable[[subprocess.Popen[bytes]], None] | None = None


@dataclass(frozen=True)
class ExecRequest:
    command: list[str]
    stdin: bool = False
    stdout: bool = False
    stderr: bool = False
    tty: bool = False


def parse_query(pairs: Iterable[tuple[str, str]]) -> ExecRequest:
    """``command`` (repeated) and the stream flags, by the kubelet's names or kubectl's."""
    command: list[str] = []
    flags: dict[str, bool] = {}
    names = {"input": "stdin", "output": "stdout", "error": "stderr"}
    for key, value in pairs:
        if key == "command":
            command.append(value)
        else:
            flags[names.get(key, key)] = value.lower() in ("1", "true")
    return ExecRequest(command, flags.get("stdin", False), flags.get("stdout", False),
                       flags.get("stderr", False), flags.get("tty", False))  # fmt: skip


def command_argv(container: Container, command: list[str]) -> list[str]:
    """argv running ``command`` inside the container: its mount namespace, then its cwd."""
    if container.pid is None:
        return list(command)
    enter = 'cd "$0" 2>/dev/null || cd /; exec "$@"'
    return ["nsenter", "-t", str(container.pid), "-m", "-n", "-u", "--", "/bin/sh", "-c", enter,
            container.cwd, *command]  # fmt: skip


def choose_protocol(headers: Mapping[str, str]) -> str | None:
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
    return next((p for p in PROTOCOLS if p in offered), None)


def _accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1(key.encode() + _GUID).digest()).decode()


def handshake(pairs: Iterable[tuple[str, str]]) -> tuple[int, bytes, str | None]:
    """(status, response bytes, protocol) for an upgrade request's headers."""
    headers = {k.lower(): v for k, v in pairs}
    upgrade = headers.get("upgrade", "").lower() == "websocket"
    conn = "upgrade" in [t.strip().lower() for t in headers.get("connection", "").split(",")]
    key = headers.get("sec-websocket-key", "")
    if not (upgrade and conn and key) or headers.get("sec-websocket-version") != "13":
        return 400, _plain(400, "Bad Request", "a WebSocket upgrade (version 13) is required"), None
    protocol = choose_protocol(headers)
    if protocol is None:
        offered = headers.get("sec-websocket-protocol", "")
        text = f"requested protocol(s) are not supported: [{offered}]; supports {list(PROTOCOLS)}"
        return 403, _plain(403, "Forbidden", text), None
    lines = [
        "HTTP/1.1 101 Switching Protocols",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Accept: {_accept_key(key)}",
        f"Sec-WebSocket-Protocol: {protocol}",
    ]
    return 101, ("\r\n".join(lines) + "\r\n\r\n").encode(), protocol


def _plain(code: int, reason: str, text: str) -> bytes:
    body = text.encode()
    head = (f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")  # fmt: skip
    return head.encode() + body


def frame(opcode: int, payload: bytes) -> bytes:
    """One unmasked (server) frame, FIN set."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def status_json(code: int | None, error: str = "") -> bytes:
    """The channel-3 message: what the kubelet writes for an exit code or a failure to start."""
    if error:
        status: dict[str, Any] = {"metadata": {}, "status": "Failure", "message": error,
                                  "reason": "InternalError", "code": 500}  # fmt: skip
    elif code == 0:
        status = {"metadata": {}, "status": "Success"}
    else:
        status = {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: command terminated with "
            f"exit code {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    return json.dumps(status, separators=(",", ":")).encode()


class _Closed(Exception):
    """The client's side of the connection is gone."""


def recv_exact(sock: Any, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock`` (both exec protocols frame by length), or _Closed."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError as exc:
            raise _Closed from exc
        if not chunk:
            raise _Closed
        buf += chunk
    return bytes(buf)


@dataclass
class _Session:
    sock: socket.socket
    request: ExecRequest
    v5: bool
    proc: subprocess.Popen[bytes] | None = None
    pipes: dict[int, int] = field(default_factory=dict)  # fd -> channel
    stdin_q: queue.Queue[bytes | None] = field(default_factory=queue.Queue)
    partial: bytearray = field(default_factory=bytearray)
    client_gone: bool = False

    # -- the socket -------------------------------------------------------------------------

    def send(self, opcode: int, payload: bytes) -> None:
        try:
            self.sock.sendall(frame(opcode, payload))
        except OSError as exc:
            raise _Closed from exc

    def channel(self, num: int, data: bytes) -> None:
        self.send(_BINARY, bytes([num]) + data)

    def _recv_exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n)

    def read_frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = self._recv_exact(2)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._recv_exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._recv_exact(8))
        mask = self._recv_exact(4) if b1 & 0x80 else b""
        data = self._recv_exact(n)
        if mask:
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
        return bool(b0 & 0x80), b0 & 0x0F, data

    def on_readable(self) -> None:
        """Handle one frame from the client."""
        fin, opcode, data = self.read_frame()
        if opcode == _PING:
            self.send(_PONG, data)
        elif opcode == _CLOSE_OP:
            with contextlib.suppress(_Closed):
                self.send(_CLOSE_OP, data[:2])
            raise _Closed
        elif opcode in (_BINARY, _TEXT, _CONT):
            self.partial += data
            if fin:
                message, self.partial = bytes(self.partial), bytearray()
                self.on_message(message)

    def on_message(self, message: bytes) -> None:
        if not message:
            return
        if self.v5 and message[0] == CLOSE and len(message) == 2:
            if message[1] == STDIN:
                self.stdin_q.put(None)
            return
        if message[0] == STDIN and self.request.stdin:
            self.stdin_q.put(message[1:])
        # RESIZE and anything else: no TTY here, nothing to do

    def readable(self) -> bool:
        pending = getattr(self.sock, "pending", None)  # TLS: bytes already decrypted
        return bool(pending and pending() > 0)


def _feed_stdin(proc: subprocess.Popen[bytes], q: queue.Queue[bytes | None]) -> None:
    """stdin on its own thread: a command that stops reading never blocks the session."""
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        while (data := q.get()) is not None:
            proc.stdin.write(data)
            proc.stdin.flush()
    with contextlib.suppress(OSError):
        proc.stdin.close()


def _start(container: Container, request: ExecRequest) -> subprocess.Popen[bytes]:
    out = subprocess.PIPE if request.stdout else subprocess.DEVNULL
    return subprocess.Popen(
        command_argv(container, request.command),
        env=dict(container.env),
        cwd=container.cwd if container.pid is None and os.path.isdir(container.cwd) else "/",
        stdin=subprocess.PIPE if request.stdin else subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.PIPE if request.stderr else subprocess.DEVNULL,
        start_new_session=True,
    )


def serve(
    sock: socket.socket, headers: Iterable[tuple[str, str]], request: ExecRequest,
    container: Container,
) -> None:  # fmt: skip
    """Answer one exec upgrade on ``sock`` and run the command to its end. ``headers``: the
    request's (``BaseHTTPRequestHandler.headers.items()``); nothing past them may have been
    read from ``sock`` (a client sends no frame before the 101)."""
    status, response, protocol = handshake(headers)
    try:
        sock.sendall(response)
    except OSError:
        return
    if status != 101:
        return
    session = _Session(sock, request, v5=protocol == PROTOCOLS[0])
    try:
        _run(session, container)
    except _Closed:
        session.client_gone = True
    finally:
        _finish(session)


def _run(s: _Session, container: Container) -> None:
    req = s.request
    first = STDOUT if req.stdout else STDERR if req.stderr else STATUS
    s.channel(first, b"")  # the connection is established (what the Go server sends first)
    if not req.command:
        s.channel(STATUS, status_json(None, "you must specify at least one command"))
        _close(s)
        return
    try:
        s.proc = _start(container, req)
    except OSError as exc:
        s.channel(STATUS, status_json(None, f"failed to exec in container: {exc}"))
        _close(s)
        return
    if container.started is not None:
        container.started(s.proc)
    if req.stdin:
        threading.Thread(target=_feed_stdin, args=(s.proc, s.stdin_q), daemon=True).start()
    for pipe, num in ((s.proc.stdout, STDOUT), (s.proc.stderr, STDERR)):
        if pipe is not None:
            s.pipes[pipe.fileno()] = num
    _pump(s)
    rc = s.proc.wait()
    s.channel(STATUS, status_json(128 - rc if rc < 0 else rc))
    _close(s)


def _pump(s: _Session) -> None:
    """Move output to the client and the client's frames in, until the output ends (or the
    command has exited and its output stayed idle for DRAIN_IDLE_S)."""
    assert s.proc is not None
    idle_since: float | None = None
    while s.pipes:
        if s.readable():
            s.on_readable()
            continue
        sock_fd = s.sock.fileno()
        ready, _, _ = select.select([sock_fd, *s.pipes], [], [], 0.2)
        for fd in ready:
            if fd == sock_fd:
                s.on_readable()
                continue
            data = os.read(fd, _CHUNK)
            if data:
                s.channel(s.pipes[fd], data)
            else:
                s.pipes.pop(fd)
        if s.proc.poll() is None or ready:
            idle_since = None
        elif idle_since is None:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > DRAIN_IDLE_S:
            return


def _close(s: _Session) -> None:
    """A normal closure, then wait briefly for the client's close frame."""
    s.send(_CLOSE_OP, struct.pack("!H", 1000))
    deadline = time.monotonic() + 2.0
    with contextlib.suppress(_Closed):
        while time.monotonic() < deadline:
            if s.readable() or select.select([s.sock], [], [], 0.1)[0]:
                _fin, opcode, _data = s.read_frame()
                if opcode == _CLOSE_OP:
                    return


def _finish(s: _Session) -> None:
    proc = s.proc
    s.stdin_q.put(None)
    if proc is not None and proc.poll() is None:  # the client went away: so does the command
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc is not None:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    with contextlib.suppress(OSError):
        s.sock.shutdown(socket.SHUT_RDWR)
