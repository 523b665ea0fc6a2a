"""A Kubeflow Notebook in the test cluster, driven as its user drives it.

``notebook_pod`` runs JupyterLab (this checkout, its server extension and built labextension)
as a pod in a Kubeflow profile namespace, the way Kubeflow's notebook controller and its
jupyter images run it: under the profile's ``default-editor`` ServiceAccount (the API server's
ServiceAccount admission projects its token at /var/run/secrets/kubernetes.io/serviceaccount;
the kubelet sets ``KUBERNETES_SERVICE_HOST``/``PORT``), ``NB_PREFIX=/notebook/NAMESPACE/NAME``
and ``--ServerApp.base_url=$(NB_PREFIX)``, ``HOME=/home/jovyan``. No kubeconfig anywhere: the
kernel has only what the pod has. The test reaches it at the pod's address and the prefix, as
Kubeflow's ingress forwards ``/notebook/NAMESPACE/NAME/`` to the pod unchanged. (Kubeflow's
images run with an empty token behind Istio's authorisation; here the server keeps a token.)

``KernelSession`` runs a notebook's cells through that server's kernel: the sessions REST API
and the kernel's websocket channel, as JupyterLab does.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .jupyter_process import free_port

ROOT = Path(__file__).resolve().parents[1]
BUILT = ROOT / "jupyter_ktrain" / "labextension"
LAB_CONFIG = """
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.expose_app_in_browser = True
"""


@dataclass
class NotebookPod:
    namespace: str
    name: str
    base: str  # http://POD_IP:PORT/notebook/NAMESPACE/NAME (no trailing slash)
    token: str
    log: Any  # () -> the container's log so far

    @property
    def prefix(self) -> str:
        return f"/notebook/{self.namespace}/{self.name}"

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"token {self.token}"}, timeout=60
        )


def _pod(ns: str, name: str, port: int, token: str, folders: Path) -> dict[str, Any]:
    """The pod Kubeflow's notebook controller makes of a Notebook (its StatefulSet's pod),
    with a jupyter image's command line; the Jupyter folders point at ``folders`` (the
    test's, visible in the pod) and this checkout is on PYTHONPATH."""
    prefix = f"/notebook/{ns}/{name}"
    env = {
        "NB_PREFIX": prefix,
        "HOME": "/home/jovyan",
        "PYTHONPATH": str(ROOT),
        "JUPYTER_CONFIG_DIR": str(folders / "config"),
        "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter-config"),  # the package's: server ext on
        "JUPYTER_PATH": str(folders / "data"),  # this checkout's built labextension
        "JUPYTER_RUNTIME_DIR": "/tmp/runtime",
        "JUPYTERLAB_SETTINGS_DIR": str(folders / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": "/tmp/workspaces",
    }
    args = [
        "--ip=0.0.0.0",
        f"--port={port}",
        "--no-browser",
        "--allow-root",
        "--ServerApp.base_url=$(NB_PREFIX)",
        f"--IdentityProvider.token={token}",
        "--ServerApp.root_dir=/home/jovyan",
        "--ServerApp.allow_origin=*",
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"notebook-name": name}},
        "spec": {
            "serviceAccountName": "default-editor",
            "containers": [
                {
                    "name": name,
                    "image": "ghcr.io/kubeflow/kubeflow/notebook-servers/jupyter-pytorch:v1.10.0",
                    "command": ["python", "-m", "jupyter", "lab"],
                    "args": args,
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "ports": [{"name": "notebook-port", "containerPort": port}],
                    "volumeMounts": [{"name": "workspace", "mountPath": "/home/jovyan"}],
                }
            ],
            "volumes": [{"name": "workspace", "emptyDir": {}}],
        },
    }


def _folders(tmp: Path) -> Path:
    """Jupyter's config, data (the labextension) and settings folders for the pod."""
    for d in ("config", "data/labextensions", "settings/@jupyterlab/apputils-extension"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    (tmp / "data" / "labextensions" / "jupyter-ktrain").symlink_to(BUILT)
    (tmp / "config" / "jupyter_server_config.py").write_text(LAB_CONFIG)
    news = tmp / "settings" / "@jupyterlab" / "apputils-extension"
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    return tmp


@contextlib.contextmanager
def notebook_pod(profile: Any, name: str, tmp: Path, timeout: float = 120) -> Iterator[NotebookPod]:
    """The Notebook pod in ``profile``'s namespace (made by the admin, as the notebook
    controller would), yielded once its Jupyter server answers under the prefix."""
    ns, token, port = profile.namespace, secrets.token_hex(16), free_port()
    manifest = _pod(ns, name, port, token, _folders(tmp))
    admin = profile.cluster.admin
    admin.create(f"/api/v1/namespaces/{ns}/pods", manifest)
    path = f"/api/v1/namespaces/{ns}/pods/{name}"

    def log() -> str:
        got = profile.kubectl("logs", name, "--tail=60", admin=True)
        return str(got.stdout or got.stderr)

    try:
        base = _wait_served(admin, path, ns, name, port, token, timeout, log)
        yield NotebookPod(ns, name, base, token, log)
    finally:
        admin.delete(path)


def _wait_served(
    admin: Any, path: str, ns: str, name: str, port: int, token: str, timeout: float, log: Any
) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = admin.get(path)
        ip = (pod.get("status") or {}).get("podIP")
        if ip:
            base = f"http://{ip}:{port}/notebook/{ns}/{name}"
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2).close()
                return base
            except OSError:
                pass
        if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
            break
        time.sleep(0.5)
    raise RuntimeError(f"the notebook pod never served {name}: {log()}")


def _notebook(cells: list[str]) -> dict[str, Any]:
    """A notebook (nbformat 4) of these code cells, on the python3 kernel."""
    code = [
        {"cell_type": "code", "source": c, "metadata": {}, "outputs": [], "execution_count": None}
        for c in cells
    ]
    spec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return {"cells": code, "metadata": {"kernelspec": spec}, "nbformat": 4, "nbformat_minor": 5}


def _message(session: str, msg_id: str, code: str) -> str:
    """An ``execute_request`` on the shell channel, as JupyterLab sends it."""
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "session": session,
        "username": "jovyan",
        "version": "5.3",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": True,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    msg = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    return json.dumps({**msg, "channel": "shell", "buffers": []})


@dataclass
class CellResult:
    text: str = ""  # stdout and stderr, in order
    error: dict[str, Any] | None = None  # ename, evalue, traceback
    outputs: list[dict[str, Any]] = field(default_factory=list)
    status: str = ""  # of the execute_reply: ok, error (a UsageError prints no error message)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == "ok"


CONNECT_S = 120.0  # the kernel's websocket: the kernel started and ready


class KernelSession:
    """A notebook's kernel session on a Jupyter server, run cell by cell over its websocket
    (the Jupyter messaging protocol, v5, in JSON)."""

    def __init__(self, pod: NotebookPod, path: str, cells: list[str]) -> None:
        import websocket

        self.pod = pod
        self.session = uuid.uuid4().hex
        with pod.client() as http:
            nb = _notebook(cells)
            put = http.put(f"/api/contents/{path}", json={"type": "notebook", "content": nb})
            put.raise_for_status()
            got = http.post(
                "/api/sessions",
                json={"path": path, "type": "notebook", "name": path,
                      "kernel": {"name": "python3"}},
            )  # fmt: skip
            got.raise_for_status()
        self.kernel_id = got.json()["kernel"]["id"]
        ws_base = pod.base.replace("http://", "ws://", 1)
        url = f"{ws_base}/api/kernels/{self.kernel_id}/channels?session_id={self.session}"
        # the server answers the upgrade once the kernel it just started is ready: on a busy
        # machine that takes longer than a read; then reads wait 5 s at a time (run's loop)
        self.ws = websocket.create_connection(
            url, header=[f"Authorization: token {pod.token}"], timeout=CONNECT_S
        )
        self.ws.settimeout(5)

    def run(self, code: str, timeout: float = 240) -> CellResult:
        """Execute ``code``; what it printed and its error, once the kernel is idle again."""
        msg_id = uuid.uuid4().hex
        self.ws.send(_message(self.session, msg_id, code))
        result = CellResult()
        idle = replied = False
        deadline = time.monotonic() + timeout
        while not (idle and replied):
            if time.monotonic() > deadline:
                raise AssertionError(f"cell still running after {timeout}s: {result.text[-2000:]}")
            try:
                msg = json.loads(self.ws.recv())
            except Exception as exc:  # websocket timeout: keep waiting
                if type(exc).__name__ == "WebSocketTimeoutException":
                    continue
                raise
            if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                continue
            kind, body = msg["msg_type"], msg["content"]
            if kind == "stream":
                result.text += body["text"]
            elif kind == "error":
                result.error = body
            elif kind in ("execute_result", "display_data"):
                result.outputs.append(body)
            elif kind == "status" and body["execution_state"] == "idle":
                idle = True
            elif kind == "execute_reply":
                replied, result.status = True, body["status"]
        return result

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()
        with self.pod.client() as http, contextlib.suppress(Exception):
            http.delete(f"/api/kernels/{self.kernel_id}")
