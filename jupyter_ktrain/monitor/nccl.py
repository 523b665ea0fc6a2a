"""Which network transport NCCL chose, read from its ``NCCL_DEBUG=INFO`` lines.

NCCL says what it uses in a few places, from strongest to weakest evidence:

- connection lines: ``Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA`` (older:
  ``Ring 00 : 15 -> 0 [receive] via NET/Socket/0``); the word after ``NET/`` is the network
  (``IB``, ``Socket``, a plugin's name such as ``IBext_v8`` or ``AWS Libfabric``);
- ``Using network IB`` / ``Using network Socket`` / ``Using network IBext`` (NCCL >= 2.6);
- device lists: ``NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:...``, where each device ends with
  its link layer (``/IB`` InfiniBand, ``/RoCE`` RDMA over Converged Ethernet, ``/IB/SHARP``),
  and ``NET/IB : No device found.``; ``NET/Socket : Using [0]eth0:...`` (older NCCL prints
  this line even when it then uses IB, so it is evidence only when IB found no device);
- plugin lines: ``P2P plugin IBext``, ``NET/OFI Selected Provider is efa``; NCCL >= 2.27
  also says ``Initialized NET plugin Socket`` and ``Assigned NET plugin Socket to comm``.

NCCL 2.27/2.28 print ``NET/IB : Using [RO]; OOB eth0:10.0.0.2<0>`` even when IB found no
device (an empty device list, then ``Failed to initialize NET plugin IB`` and ``Using network
Socket``): an IB line without a device is evidence *against* IB, and the verdict follows the
last line of the strongest kind, not the first.

RoCE is told from InfiniBand by the ``/RoCE`` link layer in the device list, or failing that
by IPv4-mapped GIDs (``::ffff:10.1.2.3``) or ``NCCL_IB_GID_INDEX`` in the log. Pure; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NcclTransportParser", "Transport", "parse_nccl_log"]

_MARKS = ("NCCL INFO", "NCCL WARN")
_VIA_NET = re.compile(r"\bvia NET/([^/\n]+?)(?:/(\d+))?(?:/(GDRDMA))?\s*$")
_USING_NETWORK = re.compile(r"\bUsing network (.+?)\s*$")
_IB_USING = re.compile(r"\bNET/IB ?: Using (.*?)(?:;\s*OOB.*)?$")
_IB_DEVICE = re.compile(r"(\w[\w.-]*):(\d+)/(IB|RoCE)(/SHARP)?")
_IB_NONE = re.compile(r"\bNET/IB ?: No device found")
_IB_ACTIVE = re.compile(r"\bNET/IB ?: Got completion")
_PLUGIN_FAILED = re.compile(r"\bFailed to initialize NET plugin (\S+)")
_PLUGIN_INITIALIZED = re.compile(r"\bInitialized NET plugin (\S+)")
_PLUGIN_ASSIGNED = re.compile(r"\bAssigned NET plugin (\S+) to comm")
_SOCKET_USING = re.compile(r"\bNET/Socket ?: Using (\[\d+\]\S+)")
_P2P_PLUGIN = re.compile(r"\bP2P plugin (\S+)")
_OFI_PROVIDER = re.compile(r"\bNET/OFI Selected Provider is (\w+)")
_ROCE_HINT = re.compile(r"(?:Gid|GID)[^\n]*::ffff:\d|NCCL_IB_GID_INDEX|NCCL_IB_ROCE_VERSION_NUM")


@dataclass(frozen=True)
class Transport:
    """What NCCL uses between nodes.

    ``kind`` is one of ``"ib"`` (InfiniBand verbs), ``"roce"`` (verbs over Ethernet),
    ``"socket"`` (TCP), ``"plugin"`` (a net plugin NCCL named, e.g. AWS Libfabric/EFA) or
    ``"unknown"``; ``network`` is NCCL's own name (``IB``, ``Socket``, ``IBext_v8``...);
    ``rdma`` says whether the data path bypasses TCP; ``gdr`` is True once a connection line
    shows GPUDirect RDMA; ``devices`` are the HCAs or interfaces NCCL listed; ``evidence`` is
    the line the verdict rests on; ``plugin`` the net plugin NCCL loaded, if it named one.
    """

    kind: str
    network: str
    rdma: bool
    devices: tuple[str, ...] = ()
    gdr: bool = False
    evidence: str = ""
    plugin: str | None = None

    def describe(self) -> str:
        """One short human line, e.g. ``NET/IB (RoCE, GPUDirect) via mlx5_0:1``."""
        flavour = {"ib": "InfiniBand", "roce": "RoCE", "socket": "TCP sockets"}.get(
            self.kind, self.kind
        )
        extra = ", GPUDirect" if self.gdr else ""
        devices = f" via {', '.join(self.devices)}" if self.devices else ""
        return f"NET/{self.network} ({flavour}{extra}){devices}"


class NcclTransportParser:
    """Feed lines one at a time; :attr:`transport` is the best verdict so far.

    ``feed`` returns the new :class:`Transport` when the verdict changed (not merely its
    evidence line), else None, so a caller can react once. Lines without ``NCCL INFO`` or
    ``NCCL WARN`` cost two substring tests.
    """

    def __init__(self) -> None:
        self.transport: Transport | None = None
        self._strength = 0
        self._ib_devices: tuple[str, ...] = ()
        self._ib_link: str | None = None  # "ib" | "roce" from the device list
        self._ib_missing = False
        self._socket_devices: tuple[str, ...] = ()
        self._roce_hint = False
        self._plugin: str | None = None
        self._gdr = False
        self._network: str | None = None
        self._evidence = ""

    def feed(self, line: str) -> Transport | None:
        if _MARKS[0] not in line and _MARKS[1] not in line:
            return None
        before = _key(self.transport)
        self._observe(line)
        return self.transport if _key(self.transport) != before else None

    # -- evidence gathering -------------------------------------------------------------
    def _observe(self, line: str) -> None:
        if _ROCE_HINT.search(line):
            self._roce_hint = True
        if m := _VIA_NET.search(line):
            self._gdr = self._gdr or m.group(3) is not None
            self._decide(m.group(1), 3, line)
        elif m := _USING_NETWORK.search(line) or _PLUGIN_ASSIGNED.search(line):
            self._decide(m.group(1), 2, line)
        elif m := _IB_USING.search(line):
            devices = _IB_DEVICE.findall(m.group(1))
            if not devices:  # NCCL >= 2.27 lists "[RO]; OOB ..." with no device at all
                self._ib_failed()
            else:
                self._ib_devices = tuple(f"{d}:{p}" for d, p, _, _ in devices)
                roce = any(link == "RoCE" for _, _, link, _ in devices)
                self._ib_link = "roce" if roce else "ib"
                self._decide("IB", 1, line)
        elif m := _PLUGIN_FAILED.search(line):
            if m.group(1).startswith("IB"):
                self._ib_failed()
        elif m := _PLUGIN_INITIALIZED.search(line):
            self._decide(m.group(1), 1, line)
        elif _IB_ACTIVE.search(line):
            self._decide("IB", 1, line)
        elif _IB_NONE.search(line):
            self._ib_missing = True
            if self._socket_devices:
                self._decide("Socket", 1, line)
        elif m := _SOCKET_USING.search(line):
            self._socket_devices = (m.group(1).split("]", 1)[1].split("<", 1)[0],)
            if self._ib_missing:
                self._decide("Socket", 1, line)
        elif m := _P2P_PLUGIN.search(line):
            self._plugin = m.group(1)
        elif m := _OFI_PROVIDER.search(line):
            self._plugin = f"OFI/{m.group(1)}"
        if self._network is not None:
            self.transport = self._build(self._network, self._evidence)

    def _ib_failed(self) -> None:
        """IB has no usable device: forget a weak IB verdict (a stronger one stands)."""
        self._ib_missing = True
        if self._network == "IB" and self._strength <= 1:
            self._network, self._strength, self._evidence = None, 0, ""
            self.transport = None

    def _decide(self, network: str, strength: int, line: str) -> None:
        if strength >= self._strength:
            self._strength = strength
            self._network = network.strip()
            self._evidence = line.strip()

    def _build(self, network: str, evidence: str) -> Transport:
        ib_like = network == "IB" or network.startswith("IBext")
        if network == "Socket":
            kind, rdma = "socket", False
        elif ib_like and (network == "IB" or self._ib_link is not None):
            kind = "roce" if self._roce_hint or self._ib_link == "roce" else "ib"
            rdma = True
        else:  # a net plugin: AWS Libfabric (EFA), OFI, ...
            kind, rdma = "plugin", True
        if ib_like:
            devices = self._ib_devices
        elif kind == "socket":
            devices = self._socket_devices
        else:
            devices = ()
        return Transport(kind, network, rdma, devices, self._gdr, evidence, self._plugin)


def _key(t: Transport | None) -> tuple[object, ...] | None:
    return None if t is None else (t.kind, t.network, t.rdma, t.devices, t.gdr, t.plugin)


def parse_nccl_log(text: str) -> Transport | None:
    """The verdict for a whole log text (any line endings)."""
    parser = NcclTransportParser()
    for line in text.splitlines():
        parser.feed(line)
    return parser.transport
