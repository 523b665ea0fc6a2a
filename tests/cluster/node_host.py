"""What a real node (``realnode.py``) could leave on this machine, read so that two readings
compare (:func:`machine_state`), and the node's way to the test registry on this machine's
loopback (:class:`Forwarder`)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

# what the kubelet writes at start (setupKernelTunables); each seen through a file of the node's
KERNEL_SETTINGS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


def _run(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


# -- what a node may leave on this machine ----------------------------------------------------


def cgroup_roots() -> list[Path]:
    """Each cgroup hierarchy's root (v1 controllers, named ones, and the unified one)."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        return [base]
    return sorted(p for p in base.iterdir() if p.is_dir() and (p / "cgroup.procs").exists())


def machine_state(tag: str = "") -> dict[str, Any]:
    """What a real node could change on this machine: the iptables rules of every table (the
    kubelet's chains and its 127.0.0.0/8 DROP rule among them), ``ip_forward`` and the bridge
    netfilter setting, the kernel settings the kubelet writes, mounts of container runtimes,
    cgroups at the hierarchies' roots named as a node's, links and routes of a node, and the
    sockets of containerd and the kubelet. Compare two readings with ``==``."""
    tables = {}
    for table in ("filter", "nat", "mangle", "raw"):
        rules = _run("iptables-save", "-t", table, check=False)
        tables[table] = sorted(ln for ln in rules.splitlines() if ln and ln[0] not in "#:")
        chains = [ln.split()[0] for ln in rules.splitlines() if ln.startswith(":")]
        tables[table + "-chains"] = sorted(chains)
    sysctl = {
        s: Path("/proc/sys", s).read_text().strip()
        for s in (
            "net/ipv4/ip_forward",
            "net/ipv4/conf/all/route_localnet",
            "net/bridge/bridge-nf-call-iptables",
            "net/netfilter/nf_conntrack_max",
            "net/netfilter/nf_conntrack_tcp_timeout_established",
            "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
            *KERNEL_SETTINGS,
        )
        if Path("/proc/sys", s).exists()
    }
    marks = ("containerd", "kubelet", "/var/lib/cni", "ktrain-node", "/run/netns/cni-")
    mounts = sorted(
        ln.split()[4] for ln in Path("/proc/self/mountinfo").read_text().splitlines()
        if any(m in ln for m in marks)
    )  # fmt: skip
    cgroups = sorted(
        str(p) for root in cgroup_roots() for p in root.iterdir()
        if p.is_dir() and (p.name.startswith(("ktrain-node", "kubepods")) or p.name == "k8s.io")
    )  # fmt: skip
    links = sorted(
        ln.split(":")[1].strip().split("@")[0]
        for ln in _run("ip", "-o", "link").splitlines()
        if ln.split(":")[1].strip().startswith(("ktnh", "cni0", "cni-"))
    )
    sockets = sorted(
        {
            ln.split()[-1]
            for ln in Path("/proc/net/unix").read_text().splitlines()[1:]
            if any(m in ln.split()[-1] for m in ("containerd", "kubelet", "dockershim"))
        }
    )
    left = ("/run/containerd", "/var/lib/cni", "/var/log/containers", "/var/log/pods",
            "/var/lib/kubelet", "/etc/cni/net.d")  # fmt: skip
    paths = [p for p in left if Path(p).exists()]
    return {
        "iptables": tables,
        "sysctl": sysctl,
        "mounts": mounts,
        "cgroups": cgroups,
        "links": links,
        "sockets": sockets,
        "paths": paths,
    }


# -- the registry, as the node sees it -------------------------------------------------------


class Forwarder:
    """TCP from ``listen`` (host, port) to ``target`` (host, port), one thread per direction."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.create_server(listen)
        self.port = int(self.sock.getsockname()[1])
        self._stop = False
        threading.Thread(target=self._accept, daemon=True, name="node-registry").start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        """Both directions of one connection; both sockets closed when both have ended."""
        with conn:
            try:
                up = socket.create_connection(self.target, timeout=10)
            except OSError:
                return
            with up:
                up.settimeout(None)
                back = threading.Thread(target=_pump, args=(up, conn), daemon=True)
                back.start()
                _pump(conn, up)
                back.join()

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self.sock.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Bytes from ``src`` to ``dst`` until ``src`` ends; then ``dst`` hears the end too."""
    with contextlib.suppress(OSError):
        while data := src.recv(1 << 16):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)
