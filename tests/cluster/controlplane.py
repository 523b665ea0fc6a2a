"""The real control plane, as local processes: etcd, kube-apiserver (RBAC on), kube-controller-
manager, kube-scheduler, the Kubeflow Training Operator v1, the Kubeflow Trainer v2 controller
and JobSet, each with its validating webhooks served over TLS (built by ``build/build.sh``).

Webhook servers get a certificate from the test CA that names both their Service and
127.0.0.1, and the webhook configurations (the projects' own manifests) point at
``https://127.0.0.1:<port>/<path>``: there is no Service network here. Each controller sees
its own ``/tmp/k8s-webhook-server`` (a private mount namespace), where all three look for
serving certificates.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .pki import Pki
from .rest import ApiError, Rest

BUILD = Path(__file__).resolve().parent / "build" / "build.sh"
NOTEBOOK_SA = "notebook"
OPERATOR_NS = "kubeflow"
TRAINER_NS = "kubeflow-system"
JOBSET_NS = "jobset-system"


def binaries(quiet: bool = False) -> Path:
    """The folder of built components; builds them first when this machine has none (long)."""
    out = subprocess.run([str(BUILD), "--print-dir"], capture_output=True, text=True, check=True)
    folder = Path(out.stdout.strip())
    if not (folder / ".complete").exists():
        if not quiet:
            print("building the test cluster's components (once per machine)...", file=sys.stderr)
        subprocess.run([str(BUILD)], check=True, stdout=subprocess.DEVNULL)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, ok: Callable[[], bool], proc: Proc | None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.popen.returncode}:\n{proc.tail()}")
        with contextlib.suppress(Exception):
            if ok():
                return
        time.sleep(0.2)
    raise RuntimeError(
        f"{what} not ready after {timeout:.0f}s" + (f":\n{proc.tail()}" if proc else "")
    )


class Proc:
    """One component: its argv, its log file, and a clean stop (SIGTERM, then SIGKILL)."""

    def __init__(self, name: str, argv: list[str], log: Path, private_tmp: Path | None = None):
        self.name = name
        self.log = log
        env = {**os.environ, "GOMAXPROCS": "2"}
        if private_tmp is not None:  # a private /tmp/k8s-webhook-server for this component
            script = (
                "mkdir -p /tmp/k8s-webhook-server && "
                f"mount --bind {shlex.quote(str(private_tmp))} /tmp/k8s-webhook-server && "
                'exec "$@"'
            )
            unshare = ["unshare", "-m", "--propagation", "private", "--"]
            argv = [*unshare, "sh", "-c", script, "sh", *argv]
        self.fh = log.open("ab")
        self.popen = subprocess.Popen(
            argv,
            stdout=self.fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def tail(self, n: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        return ""

    def stop(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)
        self.fh.close()


class ControlPlane:
    """Starts and stops every real component; ``admin`` is a client with system:masters."""

    def __init__(self, workdir: Path, bins: Path | None = None) -> None:
        self.dir = workdir
        self.bin = (bins or binaries()) / "bin"
        self.manifests = (bins or binaries()) / "manifests"
        self.pki = Pki(workdir / "pki")
        self.procs: list[Proc] = []
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.admin_token = secrets.token_hex(16)
        self.admin = Rest(self.url, self.admin_token, self.pki.ca.cert)
        self.kubeconfig = workdir / "admin.kubeconfig"

    # -- helpers ----------------------------------------------------------------------------

    def _start(self, name: str, argv: list[str], private_tmp: Path | None = None) -> Proc:
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        p = Proc(name, argv, self.dir / "logs" / f"{name}.log", private_tmp)
        self.procs.append(p)
        return p

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        r = subprocess.run(
            [str(self.bin / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            input=stdin,
            timeout=120,
        )
        if check and r.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def write_kubeconfig(self, path: Path, server: str, token: str, namespace: str) -> Path:
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ktrain-test",
                    "cluster": {"server": server, "certificate-authority": str(self.pki.ca.cert)},
                }
            ],
            "users": [{"name": "ktrain-test", "user": {"token": token}}],
            "contexts": [
                {
                    "name": "ktrain-test",
                    "context": {
                        "cluster": "ktrain-test",
                        "user": "ktrain-test",
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "ktrain-test",
            "preferences": {},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    def _healthy(self, url: str, verify: bool = True) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        if not verify:
            ctx = ssl._create_unverified_context()
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.admin_token}"})
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            return bool(resp.status == 200)

    # -- the components ---------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self._etcd_and_apiserver()
            self._controllers()
            self._kubeflow()
        except BaseException:
            self.stop()
            raise
        return self

    def _etcd_and_apiserver(self) -> None:
        etcd_port, peer = free_port(), free_port()
        etcd = self._start(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name",
                "default",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )
        _wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"), etcd)
        pki = self.pki
        serving = pki.issue(
            "apiserver",
            "kube-apiserver",
            dns=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            ips=("127.0.0.1", "10.96.0.1"),
        )
        to_kubelet = pki.issue(
            "apiserver-kubelet-client", "kube-apiserver", org="system:masters", client=True
        )
        sa = pki.keypair("sa")
        tokens = self.dir / "tokens.csv"
        tokens.write_text(f'{self.admin_token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        api = self._start(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                "--etcd-servers",
                f"http://127.0.0.1:{etcd_port}",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(self.port),
                "--advertise-address",
                _advertise_address(),
                "--tls-cert-file",
                str(serving.cert),
                "--tls-private-key-file",
                str(serving.key),
                "--client-ca-file",
                str(pki.ca.cert),
                "--token-auth-file",
                str(tokens),
                "--authorization-mode",
                "Node,RBAC",
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file",
                str(sa.cert),
                "--service-account-signing-key-file",
                str(sa.key),
                "--service-cluster-ip-range",
                "10.96.0.0/16",
                "--kubelet-client-certificate",
                str(to_kubelet.cert),
                "--kubelet-client-key",
                str(to_kubelet.key),
                "--kubelet-preferred-address-types",
                "InternalIP",
                "--allow-privileged=true",
                "--profiling=false",
                "--cert-dir",
                str(self.dir / "apiserver-certs"),
            ],
        )
        _wait("kube-apiserver", lambda: self._healthy(f"{self.url}/readyz"), api)
        self.write_kubeconfig(self.kubeconfig, self.url, self.admin_token, "default")

    def _controllers(self) -> None:
        sa = self.pki.keypair("sa")
        kcm = self._start(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--authentication-kubeconfig",
                str(self.kubeconfig),
                "--authorization-kubeconfig",
                str(self.kubeconfig),
                "--leader-elect=true",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(free_port()),
                "--service-account-private-key-file",
                str(sa.key),
                "--root-ca-file",
                str(self.pki.ca.cert),
                "--cluster-name",
                "ktrain-test",
                "--concurrent-gc-syncs",
                "5",
            ],
        )
        sched = self._start(
            "kube-scheduler",
            [
                str(self.bin / "kube-scheduler"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--authentication-kubeconfig",
                str(self.kubeconfig),
                "--authorization-kubeconfig",
                str(self.kubeconfig),
                "--leader-elect=true",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(free_port()),
            ],
        )

        def leases() -> bool:
            got = self.admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
            names = {i["metadata"]["name"] for i in got["items"]}
            return {"kube-controller-manager", "kube-scheduler"} <= names

        _wait("kube-controller-manager and kube-scheduler leases", leases, kcm)
        if sched.popen.poll() is not None:
            raise RuntimeError(f"kube-scheduler exited:\n{sched.tail()}")

    # -- Kubeflow ---------------------------------------------------------------------------

    def _webhook_cert(self, name: str, service: str, namespace: str) -> tuple[Path, Any]:
        pair = self.pki.issue(
            f"webhook-{name}",
            f"{service}.{namespace}.svc",
            dns=(f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"),
            ips=("127.0.0.1",),
        )
        certs = self.dir / "webhooks" / name
        (certs / "serving-certs").mkdir(parents=True, exist_ok=True)
        shutil.copy(pair.cert, certs / "serving-certs" / "tls.crt")
        shutil.copy(pair.key, certs / "serving-certs" / "tls.key")
        return certs, pair

    def _webhooks(self, path: Path, prefix: str, port: int) -> None:
        """The project's own webhook configurations, pointed at 127.0.0.1:port, named
        ``validator.<prefix>`` / ``defaulter.<prefix>`` (as the projects' kustomizations name
        them; the Training Operator's certificate rotator looks its own up by that name)."""
        import base64

        ca = base64.b64encode(self.pki.ca.cert.read_bytes()).decode()
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            kind = doc["kind"]
            role = "validator" if kind.startswith("Validating") else "defaulter"
            doc["metadata"]["name"] = f"{role}.{prefix}"
            for hook in doc.get("webhooks", []):
                svc = hook["clientConfig"].pop("service")
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{svc.get('path', '/')}",
                    "caBundle": ca,
                }
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(docs)
        )

    def _namespace(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.admin.create("/api/v1/namespaces", {"metadata": {"name": name}})

    def _kubeflow(self) -> None:
        m = self.manifests
        self.kubectl("apply", "--server-side", "-f", str(m / "training-operator/base/crds"))
        self.kubectl("apply", "--server-side", "-f", str(m / "trainer/base/crds"))
        self.kubectl("apply", "--server-side", "-f", str(m / "jobset/components/crd/bases"))
        for ns in (OPERATOR_NS, TRAINER_NS, JOBSET_NS):
            self._namespace(ns)
        procs = [self._training_operator(), self._jobset(), self._trainer()]
        for name, url, proc in procs:
            _wait(name, lambda url=url: self._healthy(url, verify=False), proc, timeout=180)
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        runtime = m / "trainer/base/runtimes/torch_distributed.yaml"
        _retry(lambda: self.kubectl("apply", "--server-side", "-f", str(runtime)), 60)

    def _training_operator(self) -> tuple[str, str, Proc]:
        port, health = free_port(), free_port()
        certs, pair = self._webhook_cert("training-operator", "training-operator", OPERATOR_NS)
        import base64

        def b64(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        # the operator's certificate rotator keeps a valid CA and cert it finds in its Secret
        secret = {
            "metadata": {"name": "training-operator-webhook-cert", "namespace": OPERATOR_NS},
            "data": {
                "ca.crt": b64(self.pki.ca.cert),
                "ca.key": b64(self.pki.ca.key),
                "tls.crt": b64(pair.cert),
                "tls.key": b64(pair.key),
            },
        }
        with contextlib.suppress(ApiError):
            self.admin.create(f"/api/v1/namespaces/{OPERATOR_NS}/secrets", secret)
        self._webhooks(
            self.manifests / "training-operator/base/webhook/manifests.yaml",
            "training-operator.kubeflow.org",
            port,
        )
        proc = self._start(
            "training-operator",
            [
                str(self.bin / "training-operator.v1"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--metrics-bind-address",
                f"127.0.0.1:{free_port()}",
                "--health-probe-bind-address",
                f"127.0.0.1:{health}",
                "--webhook-server-port",
                str(port),
                "--pytorch-init-container-max-tries",
                "100",
            ],
            private_tmp=certs,
        )
        return "training-operator", f"http://127.0.0.1:{health}/readyz", proc

    def _config(self, name: str, body: dict[str, Any]) -> Path:
        path = self.dir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(body))
        return path

    def _jobset(self) -> tuple[str, str, Proc]:
        port, health = free_port(), free_port()
        certs, _ = self._webhook_cert("jobset", "jobset-webhook-service", JOBSET_NS)
        self._webhooks(
            self.manifests / "jobset/components/webhook/manifests.yaml",
            "jobset.x-k8s.io",
            port,
        )
        config = self._config(
            "jobset",
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": False},
                "webhook": {"port": port, "host": "127.0.0.1"},
                "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
                "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            },
        )
        proc = self._start(
            "jobset",
            [
                str(self.bin / "jobset"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--config",
                str(config),
                "--metrics-bind-address",
                f"127.0.0.1:{free_port()}",
                "--health-probe-bind-address",
                f"127.0.0.1:{health}",
            ],
            private_tmp=certs,
        )
        return "jobset", f"http://127.0.0.1:{health}/readyz", proc

    def _trainer(self) -> tuple[str, str, Proc]:
        port, health = free_port(), free_port()
        self.trainer_status_port = free_port()
        certs, _ = self._webhook_cert("trainer", "kubeflow-trainer-controller-manager", TRAINER_NS)
        self._webhooks(
            self.manifests / "trainer/base/webhook/manifests.yaml",
            "trainer.kubeflow.org",
            port,
        )
        config = self._config(
            "trainer",
            {
                "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
                "kind": "Configuration",
                "health": {
                    "healthProbeBindAddress": f"127.0.0.1:{health}",
                    "readinessEndpointName": "readyz",
                    "livenessEndpointName": "healthz",
                },
                "metrics": {"bindAddress": "0", "secureServing": False},
                "webhook": {"port": port, "host": "127.0.0.1"},
                "leaderElection": {"leaderElect": False},
                "certManagement": {"enable": False},
                "statusServer": {"port": self.trainer_status_port},
            },
        )
        proc = self._start(
            "trainer-controller-manager",
            [
                str(self.bin / "trainer-controller-manager"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--config",
                str(config),
            ],
            private_tmp=certs,
        )
        return "trainer-controller-manager", f"http://127.0.0.1:{health}/readyz", proc

    # -- users ------------------------------------------------------------------------------

    def notebook_token(self, namespace: str) -> str:
        """A token of the namespace's ``notebook`` service account (made when missing)."""
        base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        with contextlib.suppress(ApiError):
            self.admin.create(base, {"metadata": {"name": NOTEBOOK_SA}})
        req = {"spec": {"expirationSeconds": 86400}}
        got = _retry(lambda: self.admin.create(f"{base}/{NOTEBOOK_SA}/token", req), 30)
        return str(got["status"]["token"])

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        self.procs.clear()

    def component_logs(self) -> dict[str, str]:
        return {p.name: p.tail(40) for p in self.procs}


def _die_with_parent() -> None:
    """In the child: SIGKILL when the process that started it dies (a killed test run leaves
    no control plane behind)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return bool(resp.status == 200)


def _retry(fn: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (ApiError, RuntimeError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _advertise_address() -> str:
    """A non-loopback address of this machine (the API server refuses to advertise loopback
    in the ``kubernetes`` Service's endpoints); loopback only when there is none."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing interface
        return str(s.getsockname()[0])
    return "127.0.0.1"


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)
