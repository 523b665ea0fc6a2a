"""The cluster context every part of the Kubernetes backend is handed (:class:`Cluster`): the
API client, the namespace, and what this backend keeps of its jobs (their watches, what their
logs told, their kinds, Kueue's queue positions). The backend makes one and passes it down;
no part reaches back to the backend.

Each command makes a backend: the watches its parts opened and the connection it made end with
it (:func:`.lookup.close`; the watches' threads hold no reference to it), and a watch ends
sooner when idle (:class:`~.watch.JobWatch`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...config import Config
from ...errors import ClusterError
from .client.kube_api import Api
from .status.job_runtime import Runtimes
from .status.kueue import QueuePositions
from .status.watch import JobWatch

if TYPE_CHECKING:
    from ...spec.job import JobSpec

__all__ = ["BACKEND_NAME", "Cluster", "Connection"]

BACKEND_NAME = "kubernetes"


class Connection:
    """The API client of one backend: the one it was given, else one connected when first
    needed (a dry run without a cluster needs none) and closed with the backend."""

    def __init__(self, config: Config, api: Api | None = None) -> None:
        self._config = config
        self._given = api
        self._made: Api | None = None

    @property
    def api(self) -> Api:
        if self._given is not None:
            return self._given
        if self._made is None:
            self._made = Api.connect(self._config.kubeconfig, self._config.context)
        return self._made

    def close(self) -> None:
        """Close the client this connected (not one it was given)."""
        if self._made is not None:
            self._made.close()


@dataclass(frozen=True, eq=False)
class Cluster:
    """One backend's view of one cluster: made once by the backend, handed to each part."""

    config: Config
    connection: Connection
    say: Callable[[str], None]
    # Each registry is written by one part only (tests/unit/test_registry_owners.py):
    #: job -> its watch (a cache of the job, its pods and events); written by :mod:`.lookup`
    watches: dict[str, JobWatch] = field(default_factory=dict)
    #: job -> what its logs told this process; written through its own methods
    runtimes: Runtimes = field(default_factory=Runtimes)
    #: job -> its kind, as created or found; written by :mod:`.lookup`
    kinds: dict[str, str] = field(default_factory=dict)
    #: Kueue's queue positions, as read; written through its own methods
    queue: QueuePositions = field(default_factory=QueuePositions)

    @property
    def api(self) -> Api:
        return self.connection.api

    @property
    def namespace(self) -> str:
        return self.config.namespace or self.api.namespace

    def namespace_for(self, spec: JobSpec) -> str:
        return str(spec.namespace or self.config.namespace or self.api.namespace)

    def forbidden(self, what: str) -> ClusterError:
        """The one line for a request RBAC refuses: which namespace, which right, who fixes
        it."""
        ns = self.namespace
        return ClusterError(
            f"forbidden: you may not {what} in namespace {ns!r}. Only a RoleBinding there gives "
            f"that right: ask an owner of {ns!r} (in Kubeflow, to add you as a contributor to "
            "that profile), or work in your own namespace."
        )

    def close(self) -> None:
        """Close the connection this opened (the job watches are ended by
        :func:`.lookup.close`, which calls this)."""
        self.connection.close()
