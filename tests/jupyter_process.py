"""Start a real ``jupyter lab`` / ``jupyter server`` for a test and stop it afterwards."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def jupyter_app(
    app: str,
    root: Path,
    env: Mapping[str, str],
    log_path: Path,
    token: str,
    python: str = sys.executable,
    cwd: Path | None = None,
) -> Iterator[str]:
    """Run ``jupyter APP`` (of interpreter ``python``: default this one; from folder ``cwd``,
    whose modules ``python -m`` puts first on the path) on a free loopback port with token
    auth; yield its base URL once ``/api/status`` answers. The log goes to ``log_path`` and is
    in the error if it dies."""
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [python, "-m", "jupyter", app, "--allow-root", "--no-browser",
             f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
             f"--ServerApp.root_dir={root}"],
            env=dict(env), stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(log_path.read_text()) from None
                    time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class PanelServer:
    """A real Jupyter server with the side panel's REST API, on its own job store."""

    url: str
    token: str
    home: Path

    def client(self, token: bool = True) -> httpx.Client:
        headers = {"Authorization": f"token {self.token}"} if token else {}
        return httpx.Client(base_url=f"{self.url}/ktrain/api", headers=headers, timeout=60)


@contextlib.contextmanager
def panel_server(tmp: Path, home: Path) -> Iterator[PanelServer]:
    """``jupyter server`` with this checkout's extension config, reading ``home`` as its
    ``KTRAIN_HOME``."""
    token = secrets.token_hex(16)
    env = {
        **os.environ,
        "KTRAIN_HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with jupyter_app("server", tmp, env, tmp / "server.log", token) as url:
        yield PanelServer(url, token, home)
