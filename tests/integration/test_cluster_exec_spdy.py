"""The test kubelet's exec over SPDY/3.1 (``tests/cluster/exec_spdy.py``): what ``kubectl
exec`` falls back to when the API server refuses its WebSocket GET, as it does for the MPI
launcher (its Role has only ``create`` on pods/exec). The client here writes SPDY frames by
hand as ``moby/spdystream`` does: one SYN_STREAM per channel with a zlib header block
(SPDY/3's dictionary), DATA frames, FIN."""

from __future__ import annotations

import json
import socket
import ssl
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.cluster import exec_spdy
from tests.integration.test_cluster_exec_ws import Server

ERROR, STDIN, STDOUT, STDERR = 1, 3, 5, 7  # client stream ids are odd


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path, serve=exec_spdy.serve)
    yield s
    s.stop()


class Client:
    def __init__(
        self, server: Server, command: list[str], stdin: bool = False,
        protocols: tuple[str, ...] = ("v5.channel.k8s.io", "v4.channel.k8s.io"),
    ) -> None:  # fmt: skip
        ctx = ssl.create_default_context(cafile=str(server.cert))
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        query = [("command", c) for c in command] + [("output", "1"), ("error", "1")]
        if stdin:
            query.append(("input", "1"))
        head = [
            f"POST /exec/ns/pod/main?{urlencode(query)} HTTP/1.1",
            "Host: kubelet",
            "Connection: Upgrade",
            "Upgrade: SPDY/3.1",
            "Content-Length: 0",
        ]
        head += [f"X-Stream-Protocol-Version: {p}" for p in protocols]  # fmt: skip
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        self.response = b""
        while b"\r\n\r\n" not in self.response:
            self.response += self.sock.recv(1)
        self.deflate = zlib.compressobj(9, zdict=exec_spdy.DICTIONARY)
        self.inflate = zlib.decompressobj(zdict=exec_spdy.DICTIONARY)
        self.streams = [(ERROR, "error"), (STDOUT, "stdout"), (STDERR, "stderr")]
        if stdin:
            self.streams.insert(1, (STDIN, "stdin"))

    def open_streams(self) -> None:
        for sid, kind in self.streams:
            block = exec_spdy.header_block({"streamtype": kind})
            block = self.deflate.compress(block) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
            self.sock.sendall(exec_spdy.control(1, 0, struct.pack("!IIBB", sid, 0, 0, 0) + block))
            kind_, _flags, payload = self.frame()
            assert kind_ == ("control", 2)  # SYN_REPLY before the next stream
            assert struct.unpack_from("!I", payload)[0] == sid
            self.inflate.decompress(payload[4:])

    def frame(self) -> tuple[Any, int, bytes]:
        first, second = struct.unpack("!II", self._exact(8))
        payload = self._exact(second & 0xFFFFFF)
        if first & 0x80000000:
            return ("control", first & 0xFFFF), second >> 24, payload
        return ("data", first), second >> 24, payload

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed"
            buf += chunk
        return buf

    def collect(self) -> tuple[dict[int, bytes], set[int]]:
        """Bytes per stream and the streams that ended (FIN), until GOAWAY."""
        out: dict[int, bytes] = {}
        ended: set[int] = set()
        while True:
            kind, flags, payload = self.frame()
            if kind == ("control", 7):
                self.sock.close()
                return out, ended
            if kind[0] == "data":
                out[kind[1]] = out.get(kind[1], b"") + payload
                if flags & 1:
                    ended.add(kind[1])


def test_output_streams_and_a_non_zero_exit_code(server: Server) -> None:
    c = Client(server, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert c.response.startswith(b"HTTP/1.1 101")
    assert b"X-Stream-Protocol-Version: v4.channel.k8s.io" in c.response
    c.open_streams()
    out, ended = c.collect()
    assert out[STDOUT] == b"out\n"
    assert out[STDERR] == b"err\n"
    status = json.loads(out[ERROR])
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert ended == {ERROR, STDOUT, STDERR}


def test_stdin_until_fin(server: Server) -> None:
    c = Client(server, ["tr", "a-z", "A-Z"], stdin=True)
    c.open_streams()
    c.sock.sendall(exec_spdy.data(STDIN, 0, b"hello "))
    c.sock.sendall(exec_spdy.data(STDIN, 1, b"spdy\n"))  # FIN: end of input
    out, _ = c.collect()
    assert out[STDOUT] == b"HELLO SPDY\n"
    assert json.loads(out[ERROR])["status"] == "Success"


def test_pings_are_echoed(server: Server) -> None:
    c = Client(server, ["sh", "-c", "sleep 0.3; echo done"])
    c.open_streams()
    c.sock.sendall(exec_spdy.control(6, 0, struct.pack("!I", 7)))
    kind, _flags, payload = c.frame()
    while kind != ("control", 6):
        kind, _flags, payload = c.frame()
    assert payload == struct.pack("!I", 7)
    out, _ = c.collect()
    assert out[STDOUT] == b"done\n"


def test_a_version_it_does_not_serve_is_refused(server: Server) -> None:
    c = Client(server, ["true"], protocols=("v5.channel.k8s.io",))
    assert c.response.startswith(b"HTTP/1.1 403")
    c.sock.close()


def test_the_header_dictionary_is_spdy3s() -> None:
    """Length-prefixed words then text, 1423 bytes, byte for byte spdystream's: a zlib stream
    names its dictionary by this Adler-32, and the peer refuses any other."""
    assert len(exec_spdy.DICTIONARY) == 1423
    assert zlib.adler32(exec_spdy.DICTIONARY) == 0xE3C6A7C2
