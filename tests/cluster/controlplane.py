"""The real control plane, as local processes: etcd, kube-apiserver (RBAC on), kube-controller-
manager, kube-scheduler, the Kubeflow Training Operator v1, the Kubeflow Trainer v2 controller,
JobSet and Kueue, each with its webhooks served over TLS, and the KubeRay operator (its webhook,
which only validates RayClusters, left off as its chart does by default) (built by
``build/build.sh``).

Webhooks are reached as on a cluster: the projects' own webhook configurations name a Service,
whose endpoints (an EndpointSlice we write, as the endpoints controller would for the
controller's pod) point at this machine's address; the API server routes to endpoints
(``--enable-aggregator-routing``) and checks the serving certificate against the Service's
DNS name. Each controller makes and rotates its own CA and certificate (its Secret, injected
into its webhook configurations) and sees its own ``/tmp/k8s-webhook-server`` (a private mount
namespace), where all three keep them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
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

from . import sandbox
from .pki import Pki
from .rest import ApiError, Rest

BUILD = Path(__file__).resolve().parent / "build" / "build.sh"
NOTEBOOK_SA = "notebook"
OPERATOR_NS = "kubeflow"
TRAINER_NS = "kubeflow-system"
JOBSET_NS = "jobset-system"
KUEUE_NS = "kueue-system"
# Kueue's pods-ready timeout here: a job whose pods are not all ready this long after admission
# is evicted and requeued (Kueue's default is 5 min; short, so a test sees it)
KUEUE_PODS_READY_TIMEOUT_S = 15
# the kinds Kueue manages here: batch/job (first in Kueue's own default list; without it its
# Job webhook, which still sees every Job JobSet creates, fails them with a nil-pointer panic)
# and its frameworks whose CRDs this cluster serves (not "kubeflow.org/mpijob": that is
# mpi-operator's MPIJob v2beta1, not served here; a MultiKueue manager watches each enabled
# kind on its workers and leaves a worker inactive where one is not served)
KUEUE_FRAMEWORKS = (
    "batch/job",
    "kubeflow.org/pytorchjob",
    "kubeflow.org/tfjob",
    "kubeflow.org/xgboostjob",
    "trainer.kubeflow.org/trainjob",
    "jobset.x-k8s.io/jobset",
    "ray.io/rayjob",
)
# CRDs whose versions Kueue's webhook converts (its certificate rotator injects their CA)
KUEUE_CONVERTED = ("localqueues", "clusterqueues", "workloads", "cohorts", "multikueueclusters")
KUBERAY_NS = "ray-system"
WEBHOOK_DIR = "/tmp/k8s-webhook-server"  # controller-runtime's default certificate folder
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


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

    def __init__(
        self,
        name: str,
        argv: list[str],
        log: Path,
        mounts: dict[str, Path] | None = None,
        env: dict[str, str] | None = None,
    ):
        self.name = name
        self.log = log
        env = {**os.environ, "GOMAXPROCS": "2", **(env or {})}
        if mounts:  # folders only this component sees, as its pod's volumes (and /etc/hosts)
            mounts = dict(mounts)
            hosts = mounts.pop("/etc/hosts", None)
            for dst in mounts:  # a scratch folder of /tmp is made on the host, as it always was
                if Path(dst).parent == Path("/tmp"):
                    Path(dst).mkdir(exist_ok=True)
            binds: list[tuple[str, Path | None, str, str, bool]] = [
                ("dir", src, "", dst, False) for dst, src in sorted(mounts.items())
            ]
            scratch = log.parent.parent / "mounts" / name
            script = sandbox.mount_script(binds, hosts, os.getcwd(), scratch)
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

    def terminate(self) -> None:
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)

    def stop(self, timeout: float = 10) -> None:
        self.terminate()
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        self.fh.close()


class ControlPlane:
    """Starts and stops every real component; ``admin`` is a client with system:masters."""

    def __init__(self, workdir: Path, bins: Path | None = None, worker: bool = False) -> None:
        self.dir = workdir
        # a MultiKueue worker: the same API server, scheduler, Kueue and Training Operator, but
        # neither JobSet, Trainer nor KubeRay (what the MultiKueue tests run is a PyTorchJob)
        self.worker = worker
        self.bin = (bins or binaries()) / "bin"
        self.manifests = (bins or binaries()) / "manifests"
        self.pki = Pki(workdir / "pki")
        self.procs: list[Proc] = []
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.admin_token = secrets.token_hex(16)
        self.admin = Rest(self.url, self.admin_token, self.pki.ca.cert)
        self.kubeconfig = workdir / "admin.kubeconfig"
        self.address = _advertise_address()
        self._mounts: dict[str, tuple[str, str, Path]] = {}  # component -> its cert Secret
        self.hosts = workdir / "hosts"  # every Service and Pod name, for a host-network pod

    # -- helpers ----------------------------------------------------------------------------

    def _start(
        self,
        name: str,
        argv: list[str],
        mounts: dict[str, Path] | None = None,
        env: dict[str, str] | None = None,
    ) -> Proc:
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        p = Proc(name, argv, self.dir / "logs" / f"{name}.log", mounts, env)
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

    def apply_folder(self, folder: Path) -> None:
        """Every manifest in a project's folder (its kustomization files are not objects)."""
        self.apply_files(
            sorted(p for p in folder.glob("*.yaml") if not p.name.startswith("kustomiz"))
        )

    def apply_files(self, files: list[Path]) -> None:
        """``kubectl apply --server-side`` of these manifest files, as the admin."""
        self.kubectl("apply", "--server-side", "--force-conflicts",
                     *[a for p in files for a in ("-f", str(p))])  # fmt: skip

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
            ips=("127.0.0.1", "10.96.0.1", self.address),
        )
        to_kubelet = pki.issue(
            "apiserver-kubelet-client", "kube-apiserver", org="system:masters", client=True
        )
        # the aggregation layer's front proxy (its own CA, as kubeadm makes it): the API server
        # proxies an APIService's requests (Kueue's visibility API) with this client
        # certificate and the user in X-Remote-* headers, which the extension server trusts
        front = Pki(pki.dir / "front-proxy")
        proxy_client = front.issue("front-proxy-client", "front-proxy-client", client=True)
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
                # every address: pods with a network of their own reach it at this machine's
                "--bind-address",
                "0.0.0.0",
                "--secure-port",
                str(self.port),
                "--advertise-address",
                self.address,
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
                # the issuer is this server, so its OIDC discovery can be reached by those who
                # verify projected tokens (Trainer's status server does)
                "--service-account-issuer",
                self.url,
                "--service-account-jwks-uri",
                f"{self.url}/openid/v1/jwks",
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
                "--enable-aggregator-routing=true",
                "--requestheader-client-ca-file",
                str(front.ca.cert),
                "--requestheader-allowed-names",
                "front-proxy-client",
                "--requestheader-username-headers",
                "X-Remote-User",
                "--requestheader-group-headers",
                "X-Remote-Group",
                "--requestheader-extra-headers-prefix",
                "X-Remote-Extra-",
                "--proxy-client-cert-file",
                str(proxy_client.cert),
                "--proxy-client-key-file",
                str(proxy_client.key),
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
        kc = str(self.kubeconfig)

        def common() -> list[str]:  # both serve their health checks on a port of their own
            return [
                "--kubeconfig",
                kc,
                "--authentication-kubeconfig",
                kc,
                "--authorization-kubeconfig",
                kc,
                "--leader-elect=true",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                str(free_port()),
            ]

        kcm = self._start(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                *common(),
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
        sched = self._start("kube-scheduler", [str(self.bin / "kube-scheduler"), *common()])

        def leases() -> bool:
            got = self.admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases")
            names = {i["metadata"]["name"] for i in got["items"]}
            return {"kube-controller-manager", "kube-scheduler"} <= names

        _wait("kube-controller-manager and kube-scheduler leases", leases, kcm)
        if sched.popen.poll() is not None:
            raise RuntimeError(f"kube-scheduler exited:\n{sched.tail()}")

    # -- Kubeflow ---------------------------------------------------------------------------

    def _webhooks(
        self, path: Path, names: dict[str, str], service: str, namespace: str, port: int
    ) -> None:
        """The project's own webhook configurations (``names``: kind -> the name its certificate
        rotator looks for), pointed at ``service`` in ``namespace``; the Service (443 ->
        ``port``) with an EndpointSlice at this machine's address; the rotator's empty Secret."""
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        for doc in docs:
            doc["metadata"]["name"] = names[doc["kind"]]
            for hook in doc.get("webhooks", []):
                ref = hook["clientConfig"]["service"]
                ref.update(name=service, namespace=namespace, port=443)
        self._service_here(service, namespace, "webhook", port)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": names["Secret"], "namespace": namespace},
        }
        objects = [secret, *docs]
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(objects),
        )

    def _service_here(self, service: str, namespace: str, port_name: str, port: int) -> None:
        """A Service (443 -> ``port``) whose endpoints are this machine's address, as the
        endpoints controller would write them for a controller's pod."""
        objects = [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": service, "namespace": namespace},
                "spec": {"ports": [{"name": port_name, "port": 443, "targetPort": port}]},
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{service}-local",
                    "namespace": namespace,
                    "labels": {"kubernetes.io/service-name": service},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.address], "conditions": {"ready": True}}],
                "ports": [{"name": port_name, "port": port, "protocol": "TCP"}],
            },
            {
                "apiVersion": "v1",
                "kind": "Endpoints",
                "metadata": {"name": service, "namespace": namespace},
                "subsets": [
                    {
                        "addresses": [{"ip": self.address}],
                        "ports": [{"name": port_name, "port": port}],
                    }
                ],
            },
        ]
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-",
            stdin=yaml.safe_dump_all(objects),
        )  # fmt: skip

    def _namespace(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            self.admin.create("/api/v1/namespaces", {"metadata": {"name": name}})

    def _kubeflow(self) -> None:
        m = self.manifests
        for folder in (
            "training-operator/base/crds",
            "trainer/base/crds",
            "jobset/components/crd/bases",
            "multus",  # NetworkAttachmentDefinitions: an RDMA cluster's Multus networks
            "kuberay",
        ):
            self.apply_folder(m / folder)
        self._kueue_crds()
        for ns in (OPERATOR_NS, TRAINER_NS, JOBSET_NS, KUEUE_NS):
            self._namespace(ns)
        procs = [self._training_operator(), self._kueue()]
        if not self.worker:
            procs[1:1] = [self._jobset(), self._trainer()]
        for name, url, proc in procs:
            secret, namespace, certs = self._mounts[name]

            def ready(
                url: str = url, secret: str = secret, ns: str = namespace, certs: Path = certs
            ) -> bool:
                self._mount_secret(ns, secret, certs)  # what the kubelet does for its pod
                return self._healthy(url, verify=False)

            _wait(name, ready, proc, timeout=180)
        if self.worker:
            return
        self._kuberay()
        self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        runtime = m / "trainer/base/runtimes/torch_distributed.yaml"
        _retry(lambda: self.kubectl("apply", "--server-side", "-f", str(runtime)), 60)

    def _training_operator(self) -> tuple[str, str, Proc]:
        port, health = free_port(), free_port()
        self._webhooks(
            self.manifests / "training-operator/base/webhook/manifests.yaml",
            {
                "ValidatingWebhookConfiguration": "validator.training-operator.kubeflow.org",
                "Secret": "training-operator-webhook-cert",
            },
            "training-operator",
            OPERATOR_NS,
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
            ],
            mounts=self._private(
                "training-operator", "training-operator-webhook-cert", OPERATOR_NS
            ),
            env={"MY_POD_NAMESPACE": OPERATOR_NS},
        )
        return "training-operator", f"http://127.0.0.1:{health}/readyz", proc

    def _kuberay(self) -> None:
        """The KubeRay operator: it reaches each Ray head's dashboard through the Service's
        cluster DNS name, which ``hosts`` (kept by the kubelet, as for a host-network pod)
        resolves."""
        self._namespace(KUBERAY_NS)
        health = free_port()
        if not self.hosts.exists():
            self.hosts.write_text("127.0.0.1\tlocalhost\n")
        proc = self._start(
            "kuberay-operator",
            [
                str(self.bin / "kuberay-operator"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--metrics-addr",
                f"127.0.0.1:{free_port()}",
                "--health-probe-bind-address",
                f"127.0.0.1:{health}",
                "--enable-leader-election=false",
                "--log-stdout-encoder",
                "console",
            ],
            mounts={"/etc/hosts": self.hosts},
            env={"POD_NAMESPACE": KUBERAY_NS},
        )
        _wait("kuberay-operator", lambda: _http_ok(f"http://127.0.0.1:{health}/readyz"), proc)

    def _mount_secret(self, namespace: str, name: str, folder: Path) -> None:
        """The controller's certificate Secret as its pod would have it mounted (the rotator
        writes the Secret and waits to see it in its certificate folder)."""
        import base64

        got = self.admin.try_get(f"/api/v1/namespaces/{namespace}/secrets/{name}") or {}
        data = got.get("data") or {}
        target = folder / "serving-certs"
        target.mkdir(parents=True, exist_ok=True)
        for key in ("ca.crt", "tls.crt", "tls.key"):
            if key in data:
                raw = base64.b64decode(data[key])
                path = target / key
                if not path.exists() or path.read_bytes() != raw:
                    path.write_bytes(raw)

    def _private(self, name: str, secret: str, namespace: str) -> dict[str, Path]:
        """The controller's certificate folder, mounted where controller-runtime looks."""
        folder = self.dir / "webhooks" / name
        folder.mkdir(parents=True, exist_ok=True)
        self._mounts[name] = (secret, namespace, folder)
        return {WEBHOOK_DIR: folder}

    def _service_account(self, name: str, namespace: str) -> dict[str, Path]:
        """The folder a pod of service account ``name`` has at SA_DIR (token, ca.crt,
        namespace), for a controller that reads its own token (Trainer's status server takes
        the cluster's OIDC issuer from it)."""
        folder = self.dir / "serviceaccounts" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "token").write_text(self.token(namespace, name))
        (folder / "ca.crt").write_bytes(self.pki.ca.cert.read_bytes())
        (folder / "namespace").write_text(namespace)
        return {SA_DIR: folder}

    def _config(self, name: str, body: dict[str, Any]) -> Path:
        path = self.dir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(body))
        return path

    def _jobset(self) -> tuple[str, str, Proc]:
        port, health = free_port(), free_port()
        self._webhooks(
            self.manifests / "jobset/components/webhook/manifests.yaml",
            {
                "ValidatingWebhookConfiguration": "jobset-validating-webhook-configuration",
                "MutatingWebhookConfiguration": "jobset-mutating-webhook-configuration",
                "Secret": "jobset-webhook-server-cert",
            },
            "jobset-webhook-service",
            JOBSET_NS,
            port,
        )
        config = self._config(
            "jobset",
            {
                "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                "kind": "Configuration",
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": True},
                "webhook": {"port": port},
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
            mounts=self._private("jobset", "jobset-webhook-server-cert", JOBSET_NS),
        )
        return "jobset", f"http://127.0.0.1:{health}/readyz", proc

    def _trainer(self) -> tuple[str, str, Proc]:
        port, health = free_port(), free_port()
        self.trainer_status_port = free_port()
        self._webhooks(
            self.manifests / "trainer/base/webhook/manifests.yaml",
            {
                "ValidatingWebhookConfiguration": "validator.trainer.kubeflow.org",
                "MutatingWebhookConfiguration": "defaulter.trainer.kubeflow.org",
                "Secret": "kubeflow-trainer-webhook-cert",
            },
            "kubeflow-trainer-controller-manager",
            TRAINER_NS,
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
                "webhook": {"port": port},
                "leaderElection": {"leaderElect": False},
                "certManagement": {
                    "enable": True,
                    "webhookServiceName": "kubeflow-trainer-controller-manager",
                    "webhookSecretName": "kubeflow-trainer-webhook-cert",
                },
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
                # progress and metrics from the trainer pods into TrainJob.status.trainerStatus
                "--feature-gates",
                "TrainJobStatus=true",
            ],
            mounts={
                **self._private(
                    "trainer-controller-manager", "kubeflow-trainer-webhook-cert", TRAINER_NS
                ),
                **self._service_account("kubeflow-trainer-controller-manager", TRAINER_NS),
            },
        )
        return "trainer-controller-manager", f"http://127.0.0.1:{health}/readyz", proc

    def _kueue_crds(self) -> None:
        """Kueue's CRDs with the conversion webhook its kustomization patches in (served by
        its webhook Service; the controller injects the CA)."""
        docs = []
        for path in sorted((self.manifests / "kueue/crd/bases").glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            if doc["spec"]["names"]["plural"] in KUEUE_CONVERTED:
                doc["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {
                            "service": {
                                "namespace": KUEUE_NS,
                                "name": "kueue-webhook-service",
                                "path": "/convert",
                                "port": 443,
                            }
                        },
                        "conversionReviewVersions": ["v1"],
                    },
                }
            docs.append(doc)
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-",
            stdin=yaml.safe_dump_all(docs),
        )  # fmt: skip

    def _kueue(self) -> tuple[str, str, Proc]:
        port, health, visibility = free_port(), free_port(), free_port()
        # its visibility API (pending workloads and their positions), served by the controller
        # and registered as Kueue's own manifests register it
        self._service_here("visibility-server", KUEUE_NS, "https", visibility)
        for path in sorted((self.manifests / "kueue/visibility").glob("apiservice_*.yaml")):
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        hooks = self.manifests / "kueue/webhook"
        merged = self.dir / "kueue-webhooks.yaml"
        merged.write_text(yaml.safe_dump_all(_kustomize_webhooks(hooks)))
        self._webhooks(
            merged,
            {
                "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
                "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
                "Secret": "kueue-webhook-server-cert",
            },
            "kueue-webhook-service",
            KUEUE_NS,
            port,
        )
        config = self._config(
            "kueue",
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "namespace": KUEUE_NS,
                "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                "metrics": {"bindAddress": "0"},
                "webhook": {"port": port},
                "leaderElection": {"leaderElect": False},
                "internalCertManagement": {"enable": True},
                "waitForPodsReady": {
                    "timeout": f"{KUEUE_PODS_READY_TIMEOUT_S}s",
                    # requeued again soon after an eviction (Kueue's default waits 60 s)
                    "requeuingStrategy": {"backoffBaseSeconds": 1, "backoffMaxSeconds": 10},
                },
                "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
            },
        )
        proc = self._start(
            "kueue",
            [
                str(self.bin / "kueue"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--config",
                str(config),
                "--visibility-server-port",
                str(visibility),
                # Topology-Aware Scheduling: on by default since v0.14 (beta), said here so that
                # a Kueue that turns it off does not make the placement tests meaningless
                "--feature-gates",
                "TopologyAwareScheduling=true",
            ],
            mounts=self._private("kueue", "kueue-webhook-server-cert", KUEUE_NS),
            env={"POD_NAMESPACE": KUEUE_NS},
        )
        return "kueue", f"http://127.0.0.1:{health}/readyz", proc

    # -- users ------------------------------------------------------------------------------

    def notebook_token(self, namespace: str) -> str:
        """A token of the namespace's ``notebook`` service account (made when missing)."""
        return self.token(namespace, NOTEBOOK_SA)

    def token(self, namespace: str, name: str) -> str:
        """A day-long token (TokenRequest) of service account ``name``, made when missing."""
        base = f"/api/v1/namespaces/{namespace}/serviceaccounts"
        with contextlib.suppress(ApiError):
            self.admin.create(base, {"metadata": {"name": name}})
        req = {"spec": {"expirationSeconds": 86400}}
        got = _retry(lambda: self.admin.create(f"{base}/{name}/token", req), 30)
        return str(got["status"]["token"])

    def stop(self) -> None:
        """Every component told at once, then each waited for (10 s in all, then killed)."""
        for p in reversed(self.procs):
            p.terminate()
        deadline = time.monotonic() + 10
        for p in reversed(self.procs):
            p.stop(max(0.1, deadline - time.monotonic()))
        self.procs.clear()

    def component_logs(self) -> dict[str, str]:
        return {p.name: p.tail(40) for p in self.procs}


def _kustomize_webhooks(folder: Path) -> list[dict[str, Any]]:
    """Kueue's webhook configurations with its kustomization's patches applied (the
    namespaceSelectors that keep its pod, Deployment and StatefulSet webhooks out of
    kube-system and its own namespace)."""
    docs = [d for d in yaml.safe_load_all((folder / "manifests.yaml").read_text()) if d]
    kustom = yaml.safe_load((folder / "kustomization.yaml").read_text())
    for item in kustom.get("patches") or []:
        patch = yaml.safe_load(item["patch"])
        for doc in docs:
            if (doc["kind"], doc["metadata"]["name"]) != (
                patch["kind"],
                patch["metadata"]["name"],
            ):
                continue
            changes = {w["name"]: w for w in patch.get("webhooks") or []}
            for hook in doc.get("webhooks") or []:
                hook.update({k: v for k, v in changes.get(hook["name"], {}).items() if k != "name"})
    return docs


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
        s.connect(("198.51.100.1", 9))  # a documentation address; no packet is sent
        return str(s.getsockname()[0])
    return "127.0.0.1"


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)
