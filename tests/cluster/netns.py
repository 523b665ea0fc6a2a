"""Each pod's own network and host name, as a container runtime with a bridge CNI gives them.

A pod's sandbox is a "pause" process (``unshare --net --uts``, ``sleep infinity``) holding the
pod's network and UTS namespaces; every container of the pod enters both (``nsenter``). The
pod's ``eth0`` is one end of a veth pair whose other end is on this kubelet's bridge, with an
address of the bridge's /24 (the podIP); its default route is the bridge's address. So two pods
may listen on the same port (a Ray worker's fixed metrics and agent ports), each pod's
``hostname`` is its name, pods reach each other at their IPs over the bridge, and they reach
this machine (the API server, controllers' Services) at its own address, which the host
answers locally (no forwarding). Processes on this machine reach pods at their IPs.

Needs root, ``ip`` and ``nsenter``; ``KTRAIN_TEST_POD_NETWORKS=0`` turns it off. Without it,
pods share this machine's network (``sandbox.py``): all listen on 127.0.0.1, and two pods that
bind the same fixed port (Ray's) clash.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import shutil
import signal
import subprocess
from dataclasses import dataclass

__all__ = ["Network", "PodNet"]


@dataclass
class PodNet:
    ip: str
    pid: int  # the pause process: its namespaces are the pod's
    proc: subprocess.Popen[bytes]
    host_end: str

    def enter(self) -> list[str]:
        """argv prefix that runs a command in the pod's network and UTS namespaces."""
        return ["nsenter", "-t", str(self.pid), "-n", "-u", "--"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Network:
    """This kubelet's bridge and the pods' addresses on it."""

    def __init__(self, bridge: str, subnet: ipaddress.IPv4Network) -> None:
        self.bridge = bridge
        self.subnet = subnet
        hosts = list(subnet.hosts())
        self.gateway = str(hosts[0])
        self._free = [str(h) for h in hosts[1:]]

    @classmethod
    def create(cls, tag: str) -> Network | None:
        """A bridge named after ``tag`` on a free 10.x.y.0/24; None where this cannot be."""
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nsenter") is None:
            return None
        used = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
        for _ in range(20):
            subnet = ipaddress.IPv4Network(
                f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24"
            )
            if str(subnet.network_address)[: -len(".0")] not in used:
                break
        bridge = f"ktb{tag}"[:15]
        net = cls(bridge, subnet)
        try:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", bridge)  # left by a killed run of this tag
            _ip("link", "add", bridge, "type", "bridge")
            _ip("addr", "add", f"{net.gateway}/24", "dev", bridge)
            _ip("link", "set", bridge, "up")
        except (subprocess.CalledProcessError, OSError):
            net.close()
            return None
        return net

    def add(self, uid: str, hostname: str) -> PodNet:
        """The pod's sandbox: namespaces, address and route, and its host name."""
        ip = self._free.pop(0)
        proc = subprocess.Popen(
            ["unshare", "--net", "--uts", "--", "/bin/sh", "-c",
             'hostname "$0" && exec sleep infinity', hostname[:63]],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        host_end = f"ktv{uid.replace('-', '')[:12]}"
        pod = PodNet(ip, proc.pid, proc, host_end)
        try:
            _wait_unshared(proc.pid)
            _ip("link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns",
                str(proc.pid))  # fmt: skip
            _ip("link", "set", host_end, "master", self.bridge, "up")
            setup = (
                f"ip link set lo up && ip addr add {ip}/24 dev eth0 && ip link set eth0 up "
                f"&& ip route add default via {self.gateway}"
            )
            subprocess.run(
                ["nsenter", "-t", str(proc.pid), "-n", "--", "/bin/sh", "-c", setup],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
        except BaseException:
            self.remove(pod)
            raise
        return pod

    def remove(self, pod: PodNet) -> None:
        """The sandbox's end: its namespaces (and the veth pair) go with the pause process."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pod.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            pod.proc.wait(10)
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            _ip("link", "del", pod.host_end)
        if pod.ip not in self._free:
            self._free.append(pod.ip)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError, OSError):
            _ip("link", "del", self.bridge)


def _wait_unshared(pid: int, timeout: float = 10) -> None:
    """Until the pause process is in namespaces of its own (``unshare`` has exec'd)."""
    import time

    mine = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/ns/net") != mine:
                return
        time.sleep(0.01)
    raise RuntimeError(f"pod sandbox process {pid} did not enter its own network namespace")
