"""Real registry (Debian's docker-registry, distribution 2.8) for tests and the benchmark, plus
a small HTTP proxy in front of it that counts uploaded bytes and injects faults.

The proxy speaks plain HTTP/1.1 to both sides and forwards everything unchanged except:
- request bodies are counted (``proxy.uploaded`` by kind: ``blob`` / ``manifest``);
- ``faults`` can answer a status without forwarding, or forward half a body and then drop both
  connections (a broken upload, as the registry sees it);
- with ``token=`` set it acts as a registry that requires Bearer tokens: ``401`` with a
  ``WWW-Authenticate: Bearer realm=.../token`` challenge, and ``GET /token`` (Basic auth checked
  against ``users``) hands out the token -- the distribution token flow, minus JWT signing.
"""

from __future__ import annotations

import base64
import http.client
import json
import shutil
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-authorization", "te", "upgrade"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def have_registry() -> bool:
    return shutil.which("docker-registry") is not None


@dataclass
class Registry:
    """A running ``docker-registry serve`` on 127.0.0.1."""

    host: str
    root: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_registry(root: Path, htpasswd: Path | None = None) -> Registry:
    """Start a registry with filesystem storage under ``root`` (and htpasswd auth if given)."""
    port = free_port()
    root.mkdir(parents=True, exist_ok=True)
    auth = ""
    if htpasswd is not None:
        auth = f"auth:\n  htpasswd:\n    realm: ktrain-test\n    path: {htpasswd}\n"
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n" + auth
    )
    log = root / "registry.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=out, stderr=out)
    reg = Registry(f"127.0.0.1:{port}", root, proc, log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"registry exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://{reg.host}/v2/", timeout=1).status_code in (200, 401):
                return reg
        except httpx.TransportError:
            time.sleep(0.05)
    reg.stop()
    raise RuntimeError("registry did not start in 20 s")


def make_htpasswd(path: Path, user: str, password: str) -> Path:
    out = subprocess.run(
        ["htpasswd", "-Bbn", user, password], capture_output=True, check=True
    ).stdout
    path.write_bytes(out)
    return path


@dataclass
class Fault:
    """Answer ``status`` (or ``drop``) for matching requests; skips the first ``after`` matches."""

    method: str
    path_contains: str
    status: int = 500
    drop: bool = False
    times: int = 1
    after: int = 0
    retry_after: str = ""
    seen: int = 0

    def hit(self, method: str, path: str) -> bool:
        if method != self.method or self.path_contains not in path or self.times <= 0:
            return False
        self.seen += 1
        if self.seen <= self.after:
            return False
        self.times -= 1
        return True


@dataclass
class ProxyState:
    upstream: str
    uploaded: Counter[str] = field(default_factory=Counter)
    log: list[tuple[str, str, int]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    token: str = ""
    users: dict[str, str] = field(default_factory=dict)
    token_requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state: ProxyState

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        st = self.state
        body = self._body()
        path = self.path
        kind = "manifest" if "/manifests/" in path else "blob" if "/blobs/" in path else "other"
        if self.command in ("PUT", "PATCH", "POST"):
            with st.lock:
                st.uploaded[kind] += len(body)
        if path.startswith("/token"):
            return self._token()
        if st.token and self.headers.get("Authorization") != f"Bearer {st.token}":
            scope = ""
            parts = path.split("/")
            if len(parts) > 3 and path.startswith("/v2/"):
                name = "/".join(
                    parts[
                        2 : next(
                            i for i, p in enumerate(parts) if p in ("manifests", "blobs", "tags")
                        )
                    ]
                )
                scope = f',scope="repository:{name}:pull,push"'
            realm = f'Bearer realm="http://{self.headers["Host"]}/token",service="fault-proxy"'
            err = {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}
            return self._reply(401, json.dumps(err).encode(), {"WWW-Authenticate": realm + scope})
        for fault in st.faults:
            with st.lock:
                hit = fault.hit(self.command, path)
            if hit and fault.drop:
                return self._drop(body)
            if hit:
                err = {"errors": [{"code": "UNKNOWN", "message": "injected fault"}]}
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                st.log.append((self.command, path, fault.status))
                return self._reply(fault.status, json.dumps(err).encode(), headers)
        self._forward(body)

    def _token(self) -> None:
        st = self.state
        auth = self.headers.get("Authorization", "")
        if st.users:
            ok = auth.startswith("Basic ") and base64.b64decode(auth[6:]).decode() in {
                f"{u}:{p}" for u, p in st.users.items()
            }
            if not ok:
                return self._reply(401, b'{"details":"bad credentials"}')
        st.token_requests += 1
        self._reply(
            200, json.dumps({"token": st.token}).encode(), {"Content-Type": "application/json"}
        )

    def _drop(self, body: bytes) -> None:
        """Forward the headers and half the body, then cut both connections."""
        host, port = self.state.upstream.split(":")
        with socket.create_connection((host, int(port))) as up:
            head = f"{self.command} {self.path} HTTP/1.1\r\n"
            for k, v in self.headers.items():
                if k.lower() not in HOP and k.lower() != "content-length":
                    head += f"{k}: {v}\r\n"
            head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            up.sendall(head.encode() + body[: len(body) // 2])
            time.sleep(0.2)
        self.state.log.append((self.command, self.path, 0))
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _forward(self, body: bytes) -> None:
        st = self.state
        conn = http.client.HTTPConnection(st.upstream, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
        if st.token:
            headers.pop("Authorization", None)
        headers["Content-Length"] = str(len(body))
        if self.command in ("GET", "HEAD", "DELETE") and not body:
            headers.pop("Content-Length")
        conn.request(self.command, self.path, body=body or None, headers=headers)
        resp = conn.getresponse()
        st.log.append((self.command, self.path, resp.status))
        self.send_response(resp.status)
        length = resp.getheader("Content-Length")
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                self.send_header(k, v)
        data = b""
        if length is None and self.command != "HEAD":
            data = resp.read()
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            if data:
                self.wfile.write(data)
            else:
                while chunk := resp.read(1 << 20):
                    self.wfile.write(chunk)
        conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle


class FaultProxy:
    """``with FaultProxy(upstream) as proxy: proxy.host`` -> ``127.0.0.1:PORT``."""

    def __init__(self, upstream: str, *, token: str = "", users: dict[str, str] | None = None):
        self.state = ProxyState(upstream, token=token, users=dict(users or {}))
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def uploaded(self) -> Counter[str]:
        return self.state.uploaded

    @property
    def faults(self) -> list[Fault]:
        return self.state.faults

    def reset(self) -> None:
        self.state.uploaded.clear()
        self.state.log.clear()


def tar_gz_layer(files: dict[str, bytes]) -> tuple[bytes, str, str]:
    """A plain (non-deterministic is fine) layer for base images: (data, digest, diff_id)."""
    from jupyter_ktrain.packaging.layer import build_layer

    layer = build_layer(files)
    return layer.data, layer.digest, layer.diff_id


def push_base_image(
    host: str,
    repo: str,
    layers: list[dict[str, bytes]] | list[bytes],
    *,
    oci: bool = False,
    index: bool = False,
    env: list[str] | None = None,
    tag: str = "latest",
    credentials: object = None,
) -> str:
    """Push a small base image through our client; returns the manifest (or index) digest.

    ``layers`` are file maps (built into layers) or ready gzip'd tar bytes.
    """
    import zlib

    from jupyter_ktrain.packaging import image as im
    from jupyter_ktrain.packaging.layer import sha256_digest
    from jupyter_ktrain.packaging.oci_client import BytesSource, RegistryClient

    built = []
    for item in layers:
        if isinstance(item, bytes):
            built.append((item, sha256_digest(item), sha256_digest(zlib.decompress(item, 31))))
        else:
            built.append(tar_gz_layer(item))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": [d for _, _, d in built]},
        "history": [{"created_by": f"test layer {i}"} for i in range(len(built))],
    }
    config_bytes = im.canonical_json(config)
    mt = im.OCI_MANIFEST if oci else im.DOCKER_MANIFEST
    ltype = im.OCI_LAYER if oci else im.DOCKER_LAYER
    ctype = im.OCI_CONFIG if oci else im.DOCKER_CONFIG
    manifest = {
        "schemaVersion": 2,
        "mediaType": mt,
        "config": {
            "mediaType": ctype,
            "digest": sha256_digest(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [{"mediaType": ltype, "digest": dg, "size": len(d)} for d, dg, _ in built],
    }
    manifest_bytes = im.canonical_json(manifest)
    with RegistryClient(host, credentials=credentials) as client:  # type: ignore[arg-type]
        for data, digest, _ in built:
            client.upload_blob(repo, digest, BytesSource(data))
        client.upload_blob(repo, sha256_digest(config_bytes), BytesSource(config_bytes))
        if not index:
            return client.put_manifest(repo, tag, manifest_bytes, mt)
        client.put_manifest(repo, sha256_digest(manifest_bytes), manifest_bytes, mt)
        desc = {
            "mediaType": mt,
            "digest": sha256_digest(manifest_bytes),
            "size": len(manifest_bytes),
        }
        idx_type = im.OCI_INDEX if oci else im.DOCKER_INDEX
        arm = {**desc, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}
        amd = {**desc, "platform": {"os": "linux", "architecture": "amd64"}}
        idx = {"schemaVersion": 2, "mediaType": idx_type, "manifests": [arm, amd]}
        return client.put_manifest(repo, tag, im.canonical_json(idx), idx_type)


def iter_log(proxy: FaultProxy) -> Iterator[tuple[str, str, int]]:
    yield from list(proxy.state.log)


def make_wheel(directory: Path, name: str, version: str, module_source: str) -> Path:
    """A minimal pure-Python wheel ``name-version-py3-none-any.whl`` in ``directory``."""
    import hashlib
    import zipfile

    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": module_source.encode(),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    out = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w") as zf:
        for path, data in files.items():
            zf.writestr(zipfile.ZipInfo(path, (1980, 1, 1, 0, 0, 0)), data)
    return out
