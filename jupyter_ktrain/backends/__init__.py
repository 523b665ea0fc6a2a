"""Backends run a captured program as a job: ``local`` (torchrun here) and ``kubernetes``."""

from __future__ import annotations

from ..errors import SpecError
from .base import Backend, Job, JobStatus, LaunchPlan

__all__ = [
    "Backend",
    "Job",
    "JobStatus",
    "LaunchPlan",
    "default_backend_name",
    "get_backend",
    "listed_backends",
]


def default_backend_name() -> str:
    """``backend`` from the user config (``%ktrain config backend=...``), else ``local``."""
    from ..config import load_config

    return load_config().backend or "local"


def get_backend(name: str | None = None) -> Backend:
    """The backend called ``name`` (default: the configured one)."""
    name = name or default_backend_name()
    if name == "local":
        from .local import LocalBackend

        return LocalBackend()
    if name == "kubernetes":
        from .kubernetes.backend import KubernetesBackend

        return KubernetesBackend()
    raise SpecError(f"--backend {name!r} is not known; use --backend local or kubernetes.")


def listed_backends() -> list[str]:
    """What ``list`` and the side panel show: ``local`` always (local jobs never hide behind
    an unreachable cluster), then the configured backend when it is another one."""
    configured = default_backend_name()
    return ["local"] if configured == "local" else ["local", configured]
