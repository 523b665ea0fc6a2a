"""torchrun's rendezvous polls every 0.1 s, not every second, in the torchrun the agent runs
(:mod:`jupyter_ktrain.pod.agent.rendezvous`): torch's own wait is asked of the same function,
with the shorter times; other waits and other modules are left as they were."""

from __future__ import annotations

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
