"""A backend's optional capabilities are checked by type: a backend without warm jobs says so in
one line where a warm run is asked of it, and attaching to its jobs needs neither capability."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jupyter_ktrain.backends.base import Backend, Job
from jupyter_ktrain.backends.capabilities import (
    ShapeKnown,
    WarmCapable,
    job_shape,
    warm_capable,
)
from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.backends.logsource import LogSource
from jupyter_ktrain.errors import BackendError
from jupyter_ktrain.jobs import JobStatus


class _CoreOnly(Backend):
    """The core verbs alone: one job, ``j``, that ran."""

    name = "core"

    def dryrun(self, *_a: object) -> None:  # type: ignore[override]
        raise NotImplementedError

    schedule = dryrun  # type: ignore[assignment]

    def status(self, name: str) -> JobStatus:
        return JobStatus(name, "Succeeded")

    def log_sources(self, name: str) -> list[LogSource]:
        return []

    def cancel(self, name: str) -> None: ...
    def delete(self, name: str) -> None: ...

    def list_jobs(self) -> list[JobStatus]:
        return [self.status("j")]

    def read_logs(self, name: str) -> Iterator[tuple[str, str]]:
        return iter([("j-0", "hello")])


def test_a_backend_without_warm_jobs_says_so_and_attaches_plainly() -> None:
    backend = _CoreOnly()
    job = backend.attach("j")
    assert (job.run, job.shape, job.state) == (None, None, "Succeeded")
    assert job_shape(backend, "j") is None
    with pytest.raises(BackendError) as e:
        Job("j", backend, run=2).status()
    assert str(e.value) == "The core backend has no warm jobs (no runs of 'j')."
    with pytest.raises(BackendError, match="has no warm jobs"):
        warm_capable(backend, "j").set_idle_limit("j", 0)


def test_both_backends_keep_warm_jobs_and_shapes() -> None:
    for backend in (LocalBackend, KubernetesBackend):
        assert issubclass(backend, WarmCapable)
        assert issubclass(backend, ShapeKnown)
