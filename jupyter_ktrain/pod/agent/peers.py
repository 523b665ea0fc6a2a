"""The nodes of a job tell each other that one failed, so every node ends by itself.

A PyTorchJob, an XGBoostJob or a TFJob is made with ``cleanPodPolicy: None`` (see
``jupyter_ktrain.backends.kubernetes.plans.builders``): the operator deletes no pod when the job
ends, so every replica's log stays readable after a success (a worker still tearing down or
printing as the master's or the chief's success ends the job) and after a failure. What
``Running`` did, stopping the pods that still run when the job failed, the nodes' agents do
themselves:

- node 0's agent (the Master, at ``MASTER_ADDR``; a TFJob's chief, first in ``TF_CONFIG``'s
  cluster) listens on its port + 1 (``MASTER_PORT``, the chief's TF port); every other
  node's agent keeps a connection to it (and makes it again when the Master's pod comes back);
- a node that failed by itself says ``ended NODE CODE`` (one that only lost a peer says
  nothing: it is not why anything ended). A bug (a code from 1 to 127: the operator fails the
  job on it) makes node 0 tell every node ``stop NODE CODE``; a fault (a code >= 128: a
  killed rank, a deleted pod) is passed on as it came;
- a node told to stop ends its command (SIGTERM to torchrun, which stops its ranks) and exits
  :data:`~jupyter_ktrain.pod.exits.PEER_FAILED`, which the operator does not restart: the job
  has failed, nothing of it keeps running, and its log stays;
- a node whose rank lost a peer (:data:`~jupyter_ktrain.pod.exits.PEER_LOST`, restartable)
  first waits up to :data:`NEWS_S` for a word of how that peer ended (none when one came
  just before): its bug is usually why, and a pod restarted then would only wait for a
  rendezvous that never comes (and lose its log); after a fault it is restarted as before;
- node 0 that succeeded says so (``ended 0 0``): a node still running :data:`LINGER_S` later
  (its rank waits on something that never comes) is stopped too, since the job has ended.

It is on where the pod's environment has ``KTRAIN_PEERS=1`` (the builder sets it); a node
without ``MASTER_ADDR`` or without a link to node 0 just runs as before: the word is a help,
never a condition for ending. Lines are short ASCII; a peer that sends anything else is
ignored.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

from ..ranks import node_index, tf_head

__all__ = [
    "LINGER_S",
    "NEWS_S",
    "PEERS_ENV",
    "Peers",
    "parse_word",
    "peers_address",
    "start_peers",
]

PEERS_ENV = "KTRAIN_PEERS"
NEWS_S = 5.0  # how long a node whose peer was lost waits for word of that peer's bug
LINGER_S = 30.0  # how long a node may run on after node 0 succeeded (and ended the job)
RETRY_S = 0.5  # between tries to reach node 0
_MAX_LINE = 256

Stop = Callable[[int, int], None]  # (failed node, its exit code)


def peers_address(env: Mapping[str, str]) -> tuple[str, int] | None:
    """Node 0's (host, port) for the word, or None when it is off or unknown."""
    if env.get(PEERS_ENV, "").strip() not in ("1", "true", "on"):
        return None
    host = (env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR") or "").strip()
    port = (env.get("PET_MASTER_PORT") or env.get("MASTER_PORT") or "").strip()
    if not host and (head := tf_head(env)) is not None:  # a TFJob: its chief
        host, port = head[0], str(head[1])
    if not host or not port.isdigit() or not 0 < int(port) < 65535:
        return None
    return host, int(port) + 1


def parse_word(line: bytes) -> tuple[str, int, int] | None:
    """``b"stop 1 3"`` -> ``("stop", 1, 3)`` (also ``ended``); None for anything else."""
    parts = line.decode("ascii", "replace").split()
    if len(parts) != 3 or parts[0] not in ("ended", "stop"):
        return None
    if not all(p.isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1]), int(parts[2])


class Peers:
    """One node's side of the word: node 0 serves it, the others keep a link to node 0.
    ``on_stop`` runs once, on a thread of this class, when a node's bug failed the job."""

    def __init__(self, node: int, address: tuple[str, int], on_stop: Stop) -> None:
        self.node = node
        self.address = address
        self._on_stop = on_stop
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._stopped: tuple[int, int] | None = None
        self._word = threading.Condition(self._lock)
        self._word_at: float | None = None  # when the last word of another node's end came
        self._closed = threading.Event()
        self._server: socket.socket | None = None

    @property
    def stopped_by(self) -> tuple[int, int] | None:
        """(node, code) of the failed node that stopped this one, or None."""
        return self._stopped

    def start(self) -> Peers:
        if self.node == 0:
            self._server = socket.create_server(("", self.address[1]), reuse_port=False)
            self._thread(self._serve)
        else:
            self._thread(self._link)
        return self

    def ended(self, code: int) -> None:
        """This node ended with ``code``: node 0 hears it; a bug (1 to 127) stops every other
        node; node 0's success (0) stops those still running :data:`LINGER_S` later."""
        if self.node == 0:
            self._heard(0, code)
            return
        if code == 0:
            return
        word = f"ended {self.node} {code}\n".encode()
        with self._lock:
            conns = list(self._conns)
        sent = False
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.sendall(word)
                sent = True
        if not sent:  # not linked (yet): one short try of its own
            with (
                contextlib.suppress(OSError),
                socket.create_connection(self.address, timeout=RETRY_S * 2) as conn,
            ):
                conn.sendall(word)

    def wait_for_word(self, timeout: float | None = None) -> tuple[int, int] | None:
        """Unless another node's end was heard in the last :data:`NEWS_S`, wait up to
        ``timeout`` (that long) for one; what stopped this node (a bug elsewhere), or None."""
        wait = NEWS_S if timeout is None else timeout
        with self._lock:
            recent = self._word_at is not None and time.monotonic() - self._word_at < NEWS_S
            if self._stopped is None and not recent:
                self._word.wait(wait)
            return self._stopped

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.close()

    # -- inside ----------------------------------------------------------------------------

    def _thread(self, target: Callable[..., None], *args: object) -> None:
        threading.Thread(target=target, args=args, daemon=True, name="ktrain-peers").start()

    def _heard(self, node: int, code: int) -> None:
        """Node 0 heard that ``node`` ended with ``code``: a bug stops every node, a fault is
        passed on (the nodes that lost a peer wait for it)."""
        if 0 < code < 128:
            self._stop(node, code, tell=True)
            return
        if node != self.node:
            self._woken()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.sendall(f"ended {node} {code}\n".encode())

    def _woken(self) -> None:
        with self._lock:
            self._word_at = time.monotonic()
            self._word.notify_all()

    def _stop(self, node: int, code: int, *, tell: bool) -> None:
        with self._lock:
            if self._stopped is not None:
                return
            self._stopped = (node, code)
            conns = list(self._conns) if tell else []
        word = f"stop {node} {code}\n".encode()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.sendall(word)
        self._woken()
        if node != self.node:
            self._on_stop(node, code)

    def _linger(self) -> None:
        """Node 0 succeeded, which ended the job: stop this node if it still runs then."""
        if self._closed.wait(LINGER_S):
            return
        with self._lock:
            if self._stopped is not None:
                return
            self._stopped = (0, 0)
        self._on_stop(0, 0)

    def _serve(self) -> None:
        server = self._server
        assert server is not None
        while not self._closed.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
                stopped = self._stopped
            if stopped is not None:  # a node that (re)joins after the word still gets it
                with contextlib.suppress(OSError):
                    conn.sendall(f"stop {stopped[0]} {stopped[1]}\n".encode())
            self._thread(self._read, conn, True)

    def _read(self, conn: socket.socket, serving: bool) -> None:
        with contextlib.suppress(OSError, ValueError), conn.makefile("rb") as lines:
            for line in lines:
                word = parse_word(line[:_MAX_LINE])
                if word is None:
                    continue
                verb, node, code = word
                if serving and verb == "ended":
                    self._heard(node, code)
                elif not serving and verb == "stop":
                    self._stop(node, code, tell=False)
                elif not serving and verb == "ended" and node == code == 0:
                    self._thread(self._linger)
                elif not serving and verb == "ended" and node != self.node:
                    self._woken()
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)
        with contextlib.suppress(OSError):
            conn.close()

    def _link(self) -> None:
        while not self._closed.is_set():
            try:
                conn = socket.create_connection(self.address, timeout=RETRY_S * 2)
            except OSError:
                self._closed.wait(RETRY_S)
                continue
            conn.settimeout(None)
            with self._lock:
                self._conns.append(conn)
            self._read(conn, False)
            self._closed.wait(RETRY_S)


def start_peers(on_stop: Stop, env: Mapping[str, str] = os.environ) -> Peers | None:
    """This node's :class:`Peers`, started; None when the word is off (not a PyTorchJob, an
    XGBoostJob or a TFJob made by ktrain, no node 0 to reach) or node 0 cannot listen (the job
    runs as before)."""
    address = peers_address(env)
    if address is None:
        return None
    try:
        return Peers(node_index(env), address, on_stop).start()
    except OSError:
        return None
