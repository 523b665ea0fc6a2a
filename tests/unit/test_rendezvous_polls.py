"""torchrun's rendezvous without its one-second waits (:mod:`jupyter_ktrain.pod.agent.
rendezvous`): the dynamic rendezvous polls every 0.1 s in the torchrun the agent runs (torch's
own wait asked of the same function, with the shorter times; other waits and modules left as
they were); a node that does not host the store starts torchrun once the store listens."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from jupyter_ktrain.pod.agent import rendezvous

rdzv = pytest.importorskip("torch.distributed.elastic.rendezvous.dynamic_rendezvous")


def test_the_poll_and_the_first_joins_skew_are_shortened_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[Any] = []
    monkeypatch.setattr(rdzv, "_delay", lambda seconds: asked.append(seconds))
    rendezvous.quicken("jupyter_ktrain.pod.runtime")  # not torchrun: left alone
    rdzv._delay(seconds=1)
    assert asked == [1]
    rendezvous.quicken("torch.distributed.run")
    quick = rdzv._delay
    rendezvous.quicken("torch.distributed.run")  # a second time: not wrapped twice
    assert rdzv._delay is quick
    for seconds in (1, (0, 0.3), 2.5):
        rdzv._delay(seconds=seconds)
    assert asked == [1, rendezvous.POLL_S, rendezvous.SKEW_S, 2.5]


def test_torchs_rendezvous_still_asks_its_waits_of_delay() -> None:
    """The two waits :func:`quicken` shortens are still how torch spells them (a torch that
    changed them would keep its own: this says so)."""
    import inspect

    source = inspect.getsource(rdzv)
    assert "_delay(seconds=1)" in source
    assert "_delay(seconds=(0, 0.3))" in source


def test_a_node_that_does_not_host_the_store_is_told_where_it_is() -> None:
    static = {"PET_MASTER_ADDR": "job-master-0", "PET_MASTER_PORT": "23456"}
    assert rendezvous.store_of({**static, "PET_NODE_RANK": "1"}) == ("job-master-0", 23456)
    assert rendezvous.store_of({**static, "PET_NODE_RANK": "0"}) is None  # it hosts it
    assert rendezvous.store_of({}) is None  # one node, or not torchrun: nothing to wait for
    elastic = {"PET_RDZV_ENDPOINT": "job-worker-0:29400", "PET_RDZV_BACKEND": "c10d"}
    assert rendezvous.store_of(elastic) == ("job-worker-0", 29400)
    here = {**elastic, "PET_RDZV_ENDPOINT": f"{socket.gethostname()}:29400"}
    assert rendezvous.store_of(here) is None


def test_torchrun_waits_for_the_hosts_store_to_listen_then_starts_at_once() -> None:
    """The agent of node 1 starts torchrun once node 0's store accepts a connection (node 0
    here: a listener opened a moment later), not a second after (torch's own retry)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        env = {"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port), "PET_NODE_RANK": "1"}
        opened = threading.Timer(0.3, held.listen)
        opened.start()
        waited = rendezvous.await_store(env, timeout=10)
        opened.join()
    assert 0.25 <= waited < 5, waited  # it waited for the listener, and not for its timeout
    # a store that never listens: torchrun starts anyway after the wait's limit
    with socket.socket() as never:
        never.bind(("127.0.0.1", 0))
        env["PET_MASTER_PORT"] = str(never.getsockname()[1])
        assert rendezvous.await_store(env, timeout=0.2) >= 0.2
