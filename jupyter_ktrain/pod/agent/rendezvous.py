"""torchrun's rendezvous without its one-second waits.

**The host's store.** Every node's torchrun meets at a TCP store that one of them hosts (node 0's
``--master-addr:--master-port`` by default, the static rendezvous; the node named by
``PET_RDZV_ENDPOINT`` with ``c10d``). A torchrun that reaches for it before it listens (its
node imported torch sooner) is refused and tries again a second later (torch's socket
connect backs off a fixed second): on a 2-node job started together, up to a second of the
start. :func:`await_store` makes the agent of a node that does not host it start torchrun once
the store accepts a connection (tried every :data:`PROBE_S`, while the node's fork server
imports torch), so torchrun's first try succeeds; after :data:`STORE_WAIT_S` it starts it
anyway (torchrun's own timeout then says what is wrong).

**The polls.**
torch's dynamic (``c10d``) rendezvous, which every multi-node job's torchrun runs, waits for the
other nodes by polling the store once a second (``_Action.SYNC`` in
``torch/distributed/elastic/rendezvous/dynamic_rendezvous.py``: ``_delay(seconds=1)``), and
skews each node's first join by a random 0-0.3 s. A node that joined before the last one
learns that the rendezvous completed up to a second late: 0-1 s (0.5 s on average) of every
job's start, and of every restart's new round, spent asleep. :func:`quicken` makes the poll
:data:`POLL_S` and the skew at most :data:`SKEW_S` in the torchrun process the agent starts
(forked from the node's fork server or not); each poll is one read of the store's state, so at
:data:`POLL_S` a 512-node job's joins cost the store about 5,000 reads a second while they
wait, which it serves. Where torch has no such function (another version), nothing changes.
"""

from __future__ import annotations

import importlib
import socket
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["POLL_S", "PROBE_S", "SKEW_S", "STORE_WAIT_S", "await_store", "quicken", "store_of"]

PROBE_S = 0.02  # between two tries of the host's store
STORE_WAIT_S = 60.0  # then torchrun starts anyway

POLL_S = 0.1  # the wait between two reads of the rendezvous state (torch: 1 s)
SKEW_S = (0.0, 0.05)  # each node's random delay before its first join (torch: 0-0.3 s)
_LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


def quicken(module: str) -> None:
    """In a process about to run ``module`` (``torch.distributed.run``: torchrun), the
    rendezvous polls every :data:`POLL_S`; any other module is left alone."""
    if module not in _LAUNCHERS:
        return
    try:  # torchrun's own module: its process has torch (the pod package never imports it)
        rdzv: Any = importlib.import_module(
            "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
        )
    except ImportError:
        return
    slow = getattr(rdzv, "_delay", None)
    if slow is None or getattr(slow, "quickened", False):
        return

    def _delay(seconds: Any) -> None:
        if seconds == 1:  # the poll while other nodes are awaited
            seconds = POLL_S
        elif isinstance(seconds, tuple) and seconds == (0, 0.3):  # the first join's skew
            seconds = SKEW_S
        slow(seconds=seconds)

    _delay.quickened = True  # type: ignore[attr-defined]
    rdzv._delay = _delay


def store_of(env: Mapping[str, str]) -> tuple[str, int] | None:
    """(host, port) of the store this node's torchrun will reach for, None where this node
    hosts it or the environment does not say (one node, a launcher that is not torchrun)."""
    endpoint = env.get("PET_RDZV_ENDPOINT", "")
    if endpoint and env.get("PET_RDZV_BACKEND", "c10d") != "static":
        host, _, port = endpoint.rpartition(":")
        hosts = {socket.gethostname(), "localhost", "127.0.0.1"}
        return None if not host or host in hosts or not port.isdigit() else (host, int(port))
    host, port = env.get("PET_MASTER_ADDR", ""), env.get("PET_MASTER_PORT", "")
    if not host or not port.isdigit() or env.get("PET_NODE_RANK", "0") == "0":
        return None
    return host, int(port)


def await_store(env: Mapping[str, str], timeout: float = STORE_WAIT_S) -> float:
    """Until the host's store (:func:`store_of`) accepts a connection, or ``timeout``; the
    seconds waited (0 where this node hosts it)."""
    where = store_of(env)
    if where is None:
        return 0.0
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            socket.create_connection(where, timeout=1.0).close()
            break
        except OSError:  # not resolvable yet, refused, unreachable: it is not up yet
            time.sleep(PROBE_S)
    return time.monotonic() - start
