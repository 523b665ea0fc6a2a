"""Backends run a captured program as a job: ``local`` (torchrun here) and ``kubernetes``."""

from __future__ import annotations

from ..errors import SpecError
from .base import Backend, Job, JobStatus, LaunchPlan

__all__ = ["Backend", "Job", "JobStatus", "LaunchPlan", "get_backend"]


def get_backend(name: str) -> Backend:
    if name == "local":
        from .local import LocalBackend

        return LocalBackend()
    raise SpecError(f"--backend {name!r} is not available yet; use --backend local.")
