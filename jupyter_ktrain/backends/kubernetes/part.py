"""A part of a :class:`~.backend.KubernetesBackend` (its warm runs, its history) that reaches
the backend weakly: the backend holds the part, and a reference back would make a cycle that
keeps the backend (and its watches, its connections) alive until a full garbage collection,
not until its command is done."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import KubernetesBackend

__all__ = ["BackendPart"]


class BackendPart:
    def __init__(self, backend: KubernetesBackend) -> None:
        self._backend = weakref.ref(backend)

    @property
    def backend(self) -> KubernetesBackend:
        """The backend this belongs to (it lives as long as its owner holds it)."""
        backend = self._backend()
        if backend is None:
            raise RuntimeError("the Kubernetes backend this belonged to is gone")
        return backend
