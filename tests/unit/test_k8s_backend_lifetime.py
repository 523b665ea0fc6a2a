"""A Kubernetes backend lives as long as the command that made it: nothing it owns points back
at it (its parts hold the cluster context it made, not the backend: so it is freed at once, not
at a full garbage collection), and its job watches (three open streams each) end with it."""

from __future__ import annotations

import gc

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.config import Config


class _Watch:
    def __init__(self) -> None:
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_a_dropped_backend_ends_its_watches_without_a_garbage_collection() -> None:
    watch = _Watch()
    was = gc.isenabled()
    gc.disable()
    try:
        backend = KubernetesBackend(config=Config(), api=object())  # type: ignore[arg-type]
        backend.cluster.watches["job"] = watch  # type: ignore[assignment]
        assert backend.warm.cluster is backend.history.cluster is backend.cluster
        del backend
        assert watch.stopped == 1
    finally:
        if was:
            gc.enable()


def test_close_ends_the_watches_and_a_later_read_may_watch_again() -> None:
    backend = KubernetesBackend(config=Config(), api=object())  # type: ignore[arg-type]
    first = _Watch()
    backend.cluster.watches["job"] = first  # type: ignore[assignment]
    backend.close()
    assert first.stopped == 1
    assert backend.cluster.watches == {}
    del backend  # closing twice is harmless
    assert first.stopped == 1
