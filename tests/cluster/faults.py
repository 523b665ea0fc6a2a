"""Fault injection, switchable per test: ``cluster.faults.fail_next(3, 429)`` and so on.

Every switch acts on the live cluster at once; ``reset()`` (the pytest fixture calls it after
each test) turns every standing fault off.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import errors

if TYPE_CHECKING:
    from .kubelet import Kubelet
    from .store import Store


@dataclass
class _Failure:
    remaining: int
    status: int
    path: str | None
    method: str | None
    retry_after: int


class Faults:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.kubelet: Kubelet | None = None
        self._lock = threading.Lock()
        self._failures: list[_Failure] = []

    # -- API server -------------------------------------------------------------------------

    def fail_next(
        self,
        n: int,
        status: int = 500,
        path: str | None = None,
        method: str | None = None,
        retry_after: int = 1,
    ) -> None:
        """Answer the next ``n`` requests (whose path contains ``path``, if given) with 429
        (``Retry-After: retry_after``) or 500, as Status objects."""
        with self._lock:
            self._failures.append(_Failure(n, status, path, method, retry_after))

    def before_request(self, method: str, path: str) -> None:
        with self._lock:
            for f in self._failures:
                if (
                    f.remaining > 0
                    and (f.path is None or f.path in path)
                    and (f.method is None or f.method == method)
                ):
                    f.remaining -= 1
                    if f.status == 429:
                        raise errors.too_many_requests(f.retry_after)
                    raise errors.internal("injected fault")
            self._failures = [f for f in self._failures if f.remaining > 0]

    def drop_watches(self) -> None:
        """End every open watch stream now (as the server does when it closes them)."""
        self.store.drop_watches()

    def expire_resource_versions(self) -> None:
        """Compact history: watches resuming from any version seen so far get 410 Gone."""
        self.store.expire()

    # -- kubelet ----------------------------------------------------------------------------

    def _kubelet(self) -> Kubelet:
        assert self.kubelet is not None, "the cluster has no kubelet"
        return self.kubelet

    def cut_logs(self, namespace: str | None = None, pod: str | None = None) -> None:
        """End open ``follow`` log streams (all, or one pod's) without the container stopping."""
        self._kubelet().logs.cut(namespace, pod)

    def kill_pod(
        self, namespace: str, pod: str, container: str | None = None, sig: int = signal.SIGKILL
    ) -> None:
        """Signal a container's processes; the kubelet then applies the pod's restartPolicy."""
        self._kubelet().signal(namespace, pod, container, sig)

    def oom_kill(self, namespace: str, pod: str, container: str | None = None) -> None:
        """SIGKILL and report ``reason: OOMKilled``, exit code 137, as the kubelet would."""
        self._kubelet().signal(namespace, pod, container, signal.SIGKILL, reason="OOMKilled")

    def restart_container(self, namespace: str, pod: str, container: str | None = None) -> None:
        """Kill a container and start it again whatever the restartPolicy (restartCount+1)."""
        self._kubelet().signal(namespace, pod, container, signal.SIGKILL, force_restart=True)

    def delete_pod(self, namespace: str, pod: str) -> None:
        res = self.store.registry.by_plural("pods")
        self.store.delete(res, namespace, pod)

    def stall_node(self, node: str, stalled: bool = True) -> None:
        """A stalled node's kubelet stops reporting: its pods keep running but their status
        freezes and the node turns NotReady (Unknown); new pods are not started there."""
        self._kubelet().stall(node, stalled)

    def reset(self) -> None:
        with self._lock:
            self._failures.clear()
        if self.kubelet is not None:
            self.kubelet.unstall_all()
            self.kubelet.logs.uncut()
