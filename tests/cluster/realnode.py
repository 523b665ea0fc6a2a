"""A real node beside the process kubelet: the kubelet and kube-proxy of the cluster's release,
containerd 2.x with Debian's runc and CNI plugins, and CoreDNS as the cluster's DNS (all built
by ``build/node.sh``; base images by ``build/images.sh``, see ``node_images.py``).

The node is a network namespace and a mount namespace of its own, held by one process
(``unshare``), which every component enters (``nsenter``):

- network: one veth pair to this machine (host end ``ktnh<tag>`` with a /24 of 10.x.y.0, the
  node's ``eth0`` at .2); the CNI bridge, the pods' veths, ``ip_forward`` and every iptables
  rule the kubelet, kube-proxy and the bridge plugin write (the kubelet's ``KUBE-FIREWALL``
  DROP of 127.0.0.0/8 among them) live in the node's namespace and go with it. This machine
  keeps one route (the pods' /24 via the node), which goes with the veth. The kubelet and the
  others reach the API server at the host end (its certificate is checked as ``localhost``);
  the API server reaches the kubelet at the node's address (its InternalIP).
- mounts: a tmpfs over ``/run``, ``/var/lib`` and ``/var/log`` (where containerd's shims,
  libcni's cache and the kubelet's ``/var/log/containers`` links would otherwise land on this
  machine), and the kernel settings the kubelet writes (``kernel.panic``,
  ``kernel.panic_on_oops``, ``vm.overcommit_memory``, ...) bound over by files of their own;
  containerd's and the kubelet's state is in the node's folder.
- cgroups: the kubelet's ``cgroupRoot`` is ``/ktrain-node-<tag>`` in every hierarchy (so pods
  are not at the root of this machine's), removed on stop after everything in it is killed.
- images: containerd pulls from the test registry (on this machine's loopback) through a small
  forwarder on the host end; the sandbox ("pause") image is our own (``build/pause``).

The node registers itself tainted ``ktrain.test/real-node=true:NoSchedule`` and labelled
``ktrain.test/real-node=true``: only pods that tolerate the taint and select the label run
there. ``node_host.machine_state`` reads what a node could leave behind on this machine;
the tests compare it before and after.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import yaml

from .controlplane import ControlPlane, Proc, _wait
from .node_host import KERNEL_SETTINGS, Forwarder, _run, cgroup_roots
from .rest import ApiError

BUILD = Path(__file__).resolve().parent / "build"
LABEL = "ktrain.test/real-node"
TAINT = {"key": LABEL, "value": "true", "effect": "NoSchedule"}
DNS_IP = "10.96.0.10"
RUNC = "/usr/sbin/runc"
CNI_BIN = "/usr/lib/cni"
PRIVATE_TMPFS = ("/run", "/var/lib", "/var/log")


def unavailable() -> str | None:
    """Why this machine cannot run a real node, or None."""
    if os.geteuid() != 0:
        return "a real node needs root (namespaces, cgroups, mounts)"
    for tool in ("ip", "iptables", "unshare", "nsenter", "conntrack", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/system-packages installs it)"
    if not Path(RUNC).exists():
        return f"{RUNC} is not installed (Debian's runc; scripts/system-packages)"
    if not (Path(CNI_BIN) / "bridge").exists():
        return f"{CNI_BIN}/bridge is not installed (containernetworking-plugins)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "the kernel has no overlayfs"
    if not Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists():
        return "no cgroup v1 memory controller (the node here runs on the hybrid layout)"
    return None


def _build(script: str) -> Path:
    """Run a build script of ``build/`` (its progress lines go to stderr) -> its folder."""
    out = subprocess.run([str(BUILD / script)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def node_binaries() -> Path:
    return _build("node.sh") / "bin"


def _free_subnets(n: int) -> list[ipaddress.IPv4Network]:
    used = _run("ip", "-4", "route")
    got: list[ipaddress.IPv4Network] = []
    while len(got) < n:
        net = ipaddress.IPv4Network(f"10.{random.randint(60, 99)}.{random.randint(0, 255)}.0/24")
        if str(net.network_address)[: -len(".0")] not in used and net not in got:
            got.append(net)
    return got


# -- the node -------------------------------------------------------------------------------


class RealNode:
    """One real node (see the module's docstring). ``registry`` is ``HOST:PORT`` on loopback;
    ``pause`` the reference of the sandbox image there."""

    def __init__(
        self, plane: ControlPlane, workdir: Path, registry: str, pause: str, name: str = "real-0"
    ) -> None:
        self.plane = plane
        self.dir = workdir
        self.name = name
        self.registry = registry
        self.pause = pause
        self.tag = f"{os.getpid() % 10000}{random.randint(0, 99)}"
        self.cgroup = f"ktrain-node-{self.tag}"
        self.host_end = f"ktnh{self.tag}"
        link, pods = _free_subnets(2)
        hosts = list(link.hosts())
        self.host_ip, self.ip = str(hosts[0]), str(hosts[1])
        self.pod_cidr = str(pods)
        self.procs: list[Proc] = []
        self.holder: subprocess.Popen[bytes] | None = None
        self.forwarder: Forwarder | None = None
        self.bin = Path()

    # -- start ---------------------------------------------------------------------------

    def start(self) -> RealNode:
        reason = unavailable()
        if reason:
            raise RuntimeError(reason)
        self.bin = node_binaries()
        for d in ("logs", "containerd", "kubelet", "pod-logs", "cni/net.d", "cni/ipam",
                  "certs.d", "sysctl"):  # fmt: skip
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        try:
            self._namespaces()
            self._cgroups()
            self._network()
            self._containerd()
            self._kubelet()
            self._kube_proxy()
            self._dns()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def enter(self) -> list[str]:
        assert self.holder is not None
        return ["nsenter", "-t", str(self.holder.pid), "-m", "-n", "--"]

    def _namespaces(self) -> None:
        sysctl = self.dir / "sysctl"
        script = ["set -e", "ip link set lo up"]
        script += [f"mount -t tmpfs -o mode=755 ktrain-node {p}" for p in PRIVATE_TMPFS]
        for s in KERNEL_SETTINGS:
            src = Path("/proc/sys", s)
            if src.exists():
                copy = sysctl / s.replace("/", ".")
                copy.write_text(src.read_text())
                script.append(f"mount --bind {copy} {src}")
        script += ["echo 1 > /proc/sys/net/ipv4/ip_forward", "echo ready", "exec sleep infinity"]
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--net", "--propagation", "private", "--",
             "sh", "-c", "\n".join(script)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        assert self.holder.stdout is not None
        line = self.holder.stdout.readline().decode().strip()
        if line != "ready":
            raise RuntimeError(f"the node's namespaces: {line} {self.holder.stdout.read()!r}")

    def _cgroups(self) -> None:
        for root in cgroup_roots():
            path = root / self.cgroup
            path.mkdir(exist_ok=True)
            for f in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset starts empty
                if (path / f).exists() and not (path / f).read_text().strip():
                    (path / f).write_text((root / f).read_text())

    def _network(self) -> None:
        assert self.holder is not None
        pid = str(self.holder.pid)
        _run("ip", "link", "add", self.host_end, "type", "veth", "peer", "name", "eth0",
             "netns", pid)  # fmt: skip
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_end)
        _run("ip", "link", "set", self.host_end, "up")
        inside = (
            f"ip addr add {self.ip}/24 dev eth0 && ip link set eth0 up && "
            f"ip route add default via {self.host_ip}"
        )
        _run(*self.enter(), "sh", "-c", inside)
        _run("ip", "route", "add", self.pod_cidr, "via", self.ip, "dev", self.host_end)
        host, port = self.registry.rsplit(":", 1)
        self.forwarder = Forwarder((self.host_ip, 0), (host, int(port)))

    def _start(self, name: str, argv: list[str]) -> Proc:
        p = Proc(name, [*self.enter(), *argv], self.dir / "logs" / f"{name}.log")
        self.procs.append(p)
        return p

    def _kubeconfig(self, name: str, cn: str, org: str = "") -> Path:
        pair = self.plane.pki.issue(f"node-{name}", cn, org=org, client=True)
        path = self.dir / f"{name}.kubeconfig"
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ktrain-test",
                    "cluster": {
                        "server": f"https://{self.host_ip}:{self.plane.port}",
                        "certificate-authority": str(self.plane.pki.ca.cert),
                        "tls-server-name": "localhost",
                    },
                }
            ],
            "users": [
                {
                    "name": name,
                    "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
                }
            ],
            "contexts": [{"name": "c", "context": {"cluster": "ktrain-test", "user": name}}],
            "current-context": "c",
        }
        path.write_text(yaml.safe_dump(cfg))
        return path

    def _containerd(self) -> None:
        d = self.dir / "containerd"
        self.sock = d / "containerd.sock"
        via = f"http://{self.host_ip}:{self.forwarder.port if self.forwarder else 0}"
        # the test registry, and the mirror of every other one (``_default``), as an
        # air-gapped cluster has it: images named elsewhere (the Training Operator's init
        # container's) are pulled from the test registry under the same path
        for host in (self.registry, "_default"):
            mirror = self.dir / "certs.d" / host
            mirror.mkdir(parents=True, exist_ok=True)
            (mirror / "hosts.toml").write_text(
                f'server = "{via}"\n\n[host."{via}"]\n  capabilities = ["pull", "resolve"]\n'
            )
        cni = {
            "cniVersion": "1.0.0",
            "name": "ktrain-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": True,
                    "ipMasq": True,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": self.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.dir / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        import json

        (self.dir / "cni" / "net.d" / "10-ktrain.conflist").write_text(json.dumps(cni))
        cri = 'plugins."io.containerd.cri.v1.runtime"'
        config = f"""version = 3
root = "{d / "root"}"
state = "{d / "state"}"
[grpc]
  address = "{self.sock}"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  discard_unpacked_layers = true
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{self.pause}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{self.dir / "certs.d"}"
[{cri}]
  enable_selinux = false
  restrict_oom_score_adj = true
  [{cri}.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{self.dir / "cni" / "net.d"}"
  [{cri}.containerd]
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = false
"""
        (d / "config.toml").write_text(config)
        env_path = f"{self.bin}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
        argv = ["env", f"PATH={env_path}", str(self.bin / "containerd"),
                "--config", str(d / "config.toml")]  # fmt: skip
        proc = self._start("containerd", argv)
        _wait("containerd", self.sock.exists, proc, timeout=60)

    def _kubelet(self) -> None:
        resolv = self.dir / "resolv.conf"
        resolv.write_text("nameserver 127.0.0.1\n")  # pods use the cluster's DNS (ClusterFirst)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(self.plane.pki.ca.cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "address": self.ip,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "clusterDNS": [DNS_IP],
            "clusterDomain": "cluster.local",
            "resolvConf": str(resolv),
            "failSwapOn": False,
            "podLogsDir": str(self.dir / "pod-logs"),
            "registerWithTaints": [TAINT],
            "evictionHard": {
                "memory.available": "50Mi",
                # a fraction of a large shared disk would evict pods that need little of it
                "nodefs.available": "512Mi",
                "imagefs.available": "512Mi",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "syncFrequency": "5s",
            "fileCheckFrequency": "5s",
            "nodeStatusUpdateFrequency": "5s",
        }
        path = self.dir / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        kubeconfig = self._kubeconfig("kubelet", f"system:node:{self.name}", "system:nodes")
        proc = self._start(
            "kubelet",
            [
                str(self.bin / "kubelet"),
                "--config", str(path),
                "--kubeconfig", str(kubeconfig),
                "--root-dir", str(self.dir / "kubelet"),
                "--cert-dir", str(self.dir / "kubelet" / "pki"),
                "--hostname-override", self.name,
                "--node-ip", self.ip,
                "--node-labels", f"{LABEL}=true",
                "--v", "1",
            ],
        )  # fmt: skip
        self._kubelet_proc = proc

    def _kube_proxy(self) -> None:
        kubeconfig = self._kubeconfig("kube-proxy", "system:kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "hostnameOverride": self.name,
            "clusterCIDR": self.pod_cidr,
            "bindAddress": self.ip,
            "healthzBindAddress": "127.0.0.1:10256",
            "metricsBindAddress": "127.0.0.1:10249",
            # pod -> Service -> pod on one bridge: answered through the node, not around it
            "iptables": {"masqueradeAll": True},
            # this machine's conntrack table and timeouts are left alone
            "conntrack": {
                "maxPerCore": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
        }
        path = self.dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._start("kube-proxy", [str(self.bin / "kube-proxy"), "--config", str(path)])

    def _dns(self) -> None:
        """CoreDNS in the node's network on :53, behind the ``kube-dns`` Service (DNS_IP) whose
        endpoints (written here, as for a host-network pod) are the node's address."""
        kubeconfig = self._kubeconfig("coredns", "coredns", "system:masters")
        corefile = self.dir / "Corefile"
        corefile.write_text(
            ".:53 {\n  errors\n  health 127.0.0.1:8080\n  ready 127.0.0.1:8181\n"
            f"  kubernetes cluster.local in-addr.arpa ip6.arpa {{\n    kubeconfig {kubeconfig} c\n"
            "    pods insecure\n    fallthrough in-addr.arpa ip6.arpa\n  }\n  cache 5\n"
            "  loadbalance\n}\n"
        )
        self._start("coredns", [str(self.bin / "coredns"), "-conf", str(corefile)])
        objects = [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "kube-dns", "namespace": "kube-system",
                             "labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "clusterIP": DNS_IP,
                    "ports": [
                        {"name": "dns", "port": 53, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                    ],
                },
            },
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "kube-dns-node",
                    "namespace": "kube-system",
                    "labels": {"kubernetes.io/service-name": "kube-dns"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.ip], "conditions": {"ready": True}}],
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        ]  # fmt: skip
        self.plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                           stdin=yaml.safe_dump_all(objects))  # fmt: skip

    def _wait_ready(self) -> None:
        def ready() -> bool:
            node = self.plane.admin.get(f"/api/v1/nodes/{self.name}")
            conds = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
            return conds.get("Ready") == "True"

        _wait(f"real node {self.name}", ready, self._kubelet_proc, timeout=120)

    # -- stop ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Everything the node started ended, its Node object deleted, and this machine as it
        was: its cgroups removed, the veth (and the route through it) deleted; the namespaces,
        their mounts, iptables rules and sockets go with their last process."""
        with contextlib.suppress(ApiError, Exception):
            self.plane.admin.delete(f"/api/v1/nodes/{self.name}")
            self.plane.admin.delete("/api/v1/namespaces/kube-system/services/kube-dns")
        for p in reversed(self.procs):
            p.terminate()
        deadline = time.monotonic() + 10
        for p in reversed(self.procs):
            p.stop(max(0.1, deadline - time.monotonic()))
        self.procs.clear()
        self._kill_remaining()
        if self.forwarder is not None:
            self.forwarder.close()
        with contextlib.suppress(RuntimeError):
            _run("ip", "link", "del", self.host_end)
        self._remove_cgroups()
        # containerd's images and snapshots (GBs with the torch base): their mounts went with
        # the node's mount namespace
        shutil.rmtree(self.dir / "containerd", ignore_errors=True)

    def _kill_remaining(self) -> None:
        """The containers (in the node's cgroups) and containerd's shims (in its mount
        namespace, reparented away from containerd), then the namespaces' holder."""
        mine = None
        if self.holder is not None:
            with contextlib.suppress(OSError):
                mine = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        for _ in range(50):
            pids = set(self._cgroup_pids())
            if mine is not None:
                for p in Path("/proc").iterdir():
                    if p.name.isdigit() and int(p.name) != os.getpid():
                        with contextlib.suppress(OSError):
                            if os.readlink(p / "ns" / "mnt") == mine:
                                pids.add(int(p.name))
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        if self.holder is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.holder.wait(10)
            if self.holder.stdout is not None:
                self.holder.stdout.close()

    def _cgroup_pids(self) -> list[int]:
        pids: list[int] = []
        for root in cgroup_roots():
            top = root / self.cgroup
            if top.exists():
                for procs in top.rglob("cgroup.procs"):
                    with contextlib.suppress(OSError):
                        pids += [int(x) for x in procs.read_text().split()]
        return pids

    def _remove_cgroups(self) -> None:
        for root in cgroup_roots():
            top = root / self.cgroup
            if not top.exists():
                continue
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in [*dirs, top]:
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)

    def logs(self) -> dict[str, str]:
        return {p.name: p.tail(40) for p in self.procs}
