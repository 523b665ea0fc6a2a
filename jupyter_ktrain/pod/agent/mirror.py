"""A warm pod's view of its job's code ConfigMap: ``python -m jupyter_ktrain.pod.agent.mirror``.

On Kubernetes a warm job's runs are ordered through its code ConfigMap: the notebook replaces
its data with the new run's files and its ``ktrain.io/warm-control`` annotation with
``{"run": N, "abort": {"N": "why"}, "idle_limit_s": S}``. This process watches that one
ConfigMap through the API server with the pod's ServiceAccount token (the job's Role allows
``get`` and ``watch`` of it and nothing else) and mirrors it into the run folder the warm
agent reads (:class:`~.warm.FolderControl`), the layout the local backend writes itself:
``runs/N/code/...`` (the run's files, rebuilt from the flat keys), ``runs/N/abort`` and, last,
``control.json``. So the agent has one way to receive runs on every backend.

It runs beside the agent as its own process (the agent stays single-threaded, so it can fork
ranks safely), started and stopped by it. Standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..protocol import format_agent_line

__all__ = ["CONFIGMAP_ENV", "CONTROL_ANNOTATION", "PATHS_ANNOTATION", "apply", "main"]

CONFIGMAP_ENV = "KTRAIN_WARM_CONFIGMAP"
CONTROL_ANNOTATION = "ktrain.io/warm-control"
PATHS_ANNOTATION = "ktrain.jupyter.org/paths"  # key=path lines (packaging.configmap)
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
WATCH_S = 240
RETRY_S = 0.5


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def apply(configmap: Mapping[str, Any], folder: Path) -> int | None:
    """Mirror ``configmap`` into ``folder``: the ordered run's files (once), its aborts, then
    ``control.json``. The ordered run, or None when the ConfigMap orders none."""
    meta = configmap.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        control = json.loads(annotations[CONTROL_ANNOTATION])
        run = int(control["run"])
    except (KeyError, ValueError, TypeError):
        return None
    code = folder / "runs" / str(run) / "code"
    if not code.is_dir():
        staging = folder / "runs" / str(run) / "code.tmp"
        table = dict(
            line.split("=", 1) for line in annotations.get(PATHS_ANNOTATION, "").splitlines()
        )
        for key, text in (configmap.get("data") or {}).items():
            _file(staging, table.get(key, key), text.encode())
        for key, b64 in (configmap.get("binaryData") or {}).items():
            _file(staging, table.get(key, key), base64.b64decode(b64))
        staging.mkdir(parents=True, exist_ok=True)
        os.replace(staging, code)
    for number, why in (control.get("abort") or {}).items():
        abort = folder / "runs" / str(int(number)) / "abort"
        if not abort.exists():
            _write(abort, str(why).encode())
    order = {"run": run, "code_dir": str(code), "idle_limit_s": control.get("idle_limit_s")}
    _write(folder / "control.json", json.dumps(order).encode())
    return run


def _file(root: Path, rel: str, data: bytes) -> None:
    if rel.startswith("lib/") or rel.startswith("/") or ".." in Path(rel).parts:
        return  # the runner library is the pod's already; nothing outside the run's folder
    _write(root / rel, data)


class _Api:
    """The API server as the pod's ServiceAccount sees it (in-cluster configuration)."""

    def __init__(self, env: Mapping[str, str], sa_dir: str = SA_DIR):
        host = env.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        self.base = f"https://{host}:{port}"
        self.sa = Path(sa_dir)
        self.namespace = (self.sa / "namespace").read_text().strip()
        self.context = ssl.create_default_context(cafile=str(self.sa / "ca.crt"))

    def _open(self, path: str, query: Mapping[str, str], timeout: float) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(query)}" if query else self.base + path
        token = (self.sa / "token").read_text().strip()  # re-read: it is rotated
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        return urllib.request.urlopen(req, timeout=timeout, context=self.context)

    def get(self, name: str) -> dict[str, Any]:
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{name}"
        with self._open(path, {}, 30) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data

    def watch(self, name: str, version: str) -> Iterator[dict[str, Any]]:
        """Events of the one ConfigMap ``name`` (a watch by name, which its Role allows)."""
        path = f"/api/v1/namespaces/{self.namespace}/configmaps"
        query = {
            "watch": "1",
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": version,
            "timeoutSeconds": str(WATCH_S),
            "allowWatchBookmarks": "true",
        }
        with self._open(path, query, WATCH_S + 30) as resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)


def follow(api: _Api, name: str, folder: Path) -> None:
    """Mirror ``name`` until it is deleted (the job is gone) or this process is stopped."""
    said = False
    while True:
        try:
            cm = api.get(name)
            apply(cm, folder)
            version = str(cm["metadata"]["resourceVersion"])
            for event in api.watch(name, version):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "DELETED":
                    return
                if kind in ("ADDED", "MODIFIED"):
                    apply(obj, folder)
                elif kind == "ERROR":  # too old a version: read it afresh
                    break
            said = False
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return
            if not said:
                _say(f"warm: reading ConfigMap {name} failed (HTTP {exc.code}); retrying")
                said = True
            time.sleep(RETRY_S)
        except (OSError, ValueError) as exc:
            if not said:
                _say(f"warm: reading ConfigMap {name} failed ({exc}); retrying")
                said = True
            time.sleep(RETRY_S)


def main(argv: list[str] | None = None) -> int:
    from .warm import CONTROL_ENV

    name, folder = os.environ.get(CONFIGMAP_ENV), os.environ.get(CONTROL_ENV)
    if not name or not folder:
        sys.stderr.write(f"jupyter_ktrain.pod.agent.mirror: {CONFIGMAP_ENV} and {CONTROL_ENV}\n")
        return 2
    with contextlib.suppress(KeyboardInterrupt):
        follow(_Api(os.environ), name, Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
