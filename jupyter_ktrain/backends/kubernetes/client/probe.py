"""A kubeconfig's server, tried before the Kubernetes client is imported (about a second): one
TCP connection, so a server that is down or unreachable is said in one line at once."""

from __future__ import annotations

import os
from pathlib import Path

from ....errors import ClusterError
from .retries import unreachable_line

__all__ = ["CONNECT_TIMEOUT_S", "probe_server"]

CONNECT_TIMEOUT_S = 2.0  # to open a connection to the API server (each request's too)


def probe_server(kubeconfig: str, context: str | None) -> None:
    """Raise the one-line ClusterError when the context's server refuses or drops a TCP
    connection (within ``CONNECT_TIMEOUT_S``). Anything this cannot read from the kubeconfig
    is left to the client, which says it better."""
    import socket
    from urllib.parse import urlsplit

    import yaml

    try:
        data = yaml.safe_load(Path(kubeconfig).read_text()) or {}
        name = context or data.get("current-context")
        ctx = next(c["context"] for c in data.get("contexts") or [] if c.get("name") == name)
        cluster = next(
            c["cluster"] for c in data.get("clusters") or [] if c.get("name") == ctx["cluster"]
        )
        server = str(cluster["server"])
        url = urlsplit(server)
        host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    except (OSError, yaml.YAMLError, StopIteration, KeyError, TypeError, ValueError):
        return
    if not host or cluster.get("proxy-url") or os.environ.get("HTTPS_PROXY"):
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        where = f"kubeconfig {kubeconfig}, context {name}"
        raise ClusterError(unreachable_line(server, exc, where)) from None
