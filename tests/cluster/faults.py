"""Fault injection, switchable per test: ``cluster.faults.fail_next(3, 429)`` and so on.

API faults act in the proxy in front of the real API server (``proxy.py``); pod faults act in
the kubelet. ``reset()`` (the pytest fixture calls it after each test) turns every standing
fault off.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kubelet import Kubelet
    from .proxy import FaultProxy
    from .rest import Rest


class Faults:
    def __init__(self, proxy: FaultProxy, kubelet: Kubelet, admin: Rest) -> None:
        self.proxy = proxy
        self.kubelet = kubelet
        self.admin = admin

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
        self.proxy.fail_next(n, status, path, method, retry_after)

    def drop_watches(self) -> None:
        """End every open watch stream now (as the server does when it closes them)."""
        self.proxy.cut(lambda s: s.kind == "watch")

    def expire_resource_versions(self) -> None:
        """As after compaction: watches resuming from any version seen so far get 410 Gone."""
        rv = self.admin.get("/api/v1/namespaces", limit=1)["metadata"]["resourceVersion"]
        self.proxy.expire(int(rv))

    def cut_logs(self, namespace: str | None = None, pod: str | None = None) -> None:
        """End open ``follow`` log streams (all, or a namespace's, or one pod's) without the
        container stopping, as a dropped connection would."""
        prefix = f"/api/v1/namespaces/{namespace}/pods/" if namespace else "/api/v1/"
        whole = f"{prefix}{pod}/log" if pod else None

        def match(s: object) -> bool:
            path = getattr(s, "path", "")
            return getattr(s, "kind", "") == "log" and (
                path == whole if whole else path.startswith(prefix)
            )

        self.proxy.cut(match)

    # -- kubelet ----------------------------------------------------------------------------

    def kill_pod(
        self, namespace: str, pod: str, container: str | None = None, sig: int = signal.SIGKILL
    ) -> None:
        """Signal a container's processes; the kubelet then applies the pod's restartPolicy."""
        self.kubelet.signal(namespace, pod, container, sig)

    def oom_kill(self, namespace: str, pod: str, container: str | None = None) -> None:
        """SIGKILL and report ``reason: OOMKilled``, exit code 137, as the kubelet would."""
        self.kubelet.signal(namespace, pod, container, signal.SIGKILL, reason="OOMKilled")

    def restart_container(self, namespace: str, pod: str, container: str | None = None) -> None:
        """Kill a container and start it again whatever the restartPolicy (restartCount+1)."""
        self.kubelet.signal(namespace, pod, container, signal.SIGKILL, force_restart=True)

    def delete_pod(self, namespace: str, pod: str) -> None:
        self.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}")

    def stall_node(self, node: str, stalled: bool = True) -> None:
        """A stalled node's kubelet stops reporting: its pods keep running, their status
        freezes, and the node lifecycle controller marks the node NotReady after its grace
        period; new pods are not started there."""
        self.kubelet.stall(node, stalled)

    def reset(self) -> None:
        self.proxy.reset()
        self.kubelet.unstall_all()
