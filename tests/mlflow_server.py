"""A real MLflow tracking server for the tests: ``mlflow server`` with a SQLite store on a free
port, read back through its REST API (``/api/2.0/mlflow/...``), killed and started again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["MlflowServer"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MlflowServer:
    """``start()`` runs ``mlflow server`` (a store in ``folder``) until GET /health says OK."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 240.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "server.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mlflow", "server",
                 "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
                 "--default-artifact-root", str(self.folder / "artifacts"),
                 "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                # its GenAI job runners (four huey consumers) have nothing to do with tracking
                env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"mlflow server exited {self.proc.returncode}: "
                    f"{(self.folder / 'server.log').read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.read().strip() == b"OK":
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server not healthy within {timeout} s")
            time.sleep(0.3)

    def kill(self) -> None:
        """kill -9 the server and every process it started (its workers)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc = None

    # -- the REST API ---------------------------------------------------------------------
    def get(self, endpoint: str, **params: Any) -> dict[str, Any]:
        query = urllib.parse.urlencode(params)
        url = f"{self.uri}/api/2.0/mlflow/{endpoint}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=30) as r:
            data: dict[str, Any] = json.loads(r.read())
        return data

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.uri}/api/2.0/mlflow/{endpoint}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            data: dict[str, Any] = json.loads(r.read())
        return data

    def runs(self, experiment: str = "ktrain") -> list[dict[str, Any]]:
        exp = self.get("experiments/get-by-name", experiment_name=experiment)["experiment"]
        found = self.post("runs/search", {"experiment_ids": [exp["experiment_id"]]})
        runs: list[dict[str, Any]] = found.get("runs", [])
        return runs

    def history(self, run_id: str, key: str) -> list[dict[str, Any]]:
        """Every point of ``key`` (the server pages at 25,000)."""
        points: list[dict[str, Any]] = []
        token = None
        while True:
            params: dict[str, Any] = {"run_id": run_id, "metric_key": key, "max_results": 25000}
            if token:
                params["page_token"] = token
            page = self.get("metrics/get-history", **params)
            points += page.get("metrics", [])
            token = page.get("next_page_token")
            if not token:
                return points

    def artifacts(self, run_id: str, path: str = "") -> list[str]:
        """Every artifact file's path under ``path``."""
        listing = self.get("artifacts/list", run_id=run_id, path=path)
        out: list[str] = []
        for f in listing.get("files", []):
            out += self.artifacts(run_id, f["path"]) if f.get("is_dir") else [f["path"]]
        return out
