"""The launch plan: typed by its backend's request, never changed after it is made, and
started only by the backend that made it; the pushed code image is pinned into a new request
that equals rendering with that image (nothing is rendered twice)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, job_objects
from jupyter_ktrain.backends.kubernetes.plans.plan import (
    PLACEHOLDER_DIGEST,
    cell_id,
    render_request,
)
from jupyter_ktrain.backends.local import LocalBackend, LocalRequest
from jupyter_ktrain.capture import capture
from jupyter_ktrain.config import Config
from jupyter_ktrain.errors import BackendError
from jupyter_ktrain.kinds import KIND_TABLE
from jupyter_ktrain.spec.job import JobSpec

PROGRAM = capture("train(2)\n", {"train": None}, ["", "def train(n):\n    return n\n"], {})
REF = "reg.example/ktrain/code@sha256:" + "ab" * 32


class _NoApi:
    """An API server that must not be asked anything."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the API was asked ({name}) for a plan of another backend")


def test_a_plan_starts_only_on_the_backend_that_made_it(tmp_path: Path) -> None:
    plan = LocalBackend(tmp_path).dryrun(JobSpec.create(name="here", nodes=2), PROGRAM)
    assert isinstance(plan.request, LocalRequest)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.request.master_port = 1  # type: ignore[misc]
    cluster = KubernetesBackend(Config(namespace="ml"), api=_NoApi())  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="made by the local backend"):
        cluster.schedule(plan)
    assert not (tmp_path / "jobs" / "here").exists()


@pytest.mark.parametrize("kind", sorted(KIND_TABLE))
def test_pinning_the_pushed_image_equals_rendering_with_it(kind: str) -> None:
    serves = any(r.metrics for r in KIND_TABLE[kind].replicas)  # not a RayJob's pods
    spec = JobSpec.create(
        name="pin",
        kind=kind,
        nodes=2,
        namespace="ml",
        image="base:1",
        metrics_port=9400 if serves else None,
    )
    request, _files = render_request(spec, PROGRAM, registry="reg.example/ktrain/code",
                                     service_monitor=True)  # fmt: skip
    placeholder = f"reg.example/ktrain/code@{PLACEHOLDER_DIGEST}"
    assert (request.route, request.image, request.image_digest) == ("registry", placeholder, None)
    pinned = request.pinned(REF, "sha256:" + "ab" * 32)
    expected = job_objects(spec, CodeSource(image=REF), cell=cell_id(PROGRAM), service_monitor=True)
    assert list(pinned.objects) == expected
    assert pinned.image_digest == "sha256:" + "ab" * 32
    assert placeholder in repr(request.objects)  # the dry run's request is as it was
    assert placeholder not in repr(pinned.objects)


def test_a_local_cpu_jobs_agents_sample_no_gpu_and_say_nothing_of_it(tmp_path: Path) -> None:
    """A job that asked for no GPU: each node's agent runs with ``--gpu-sampling off`` (NVML is
    never loaded, so no "GPU sampling off: NVML not available" on every node at every start)."""
    plan = LocalBackend(tmp_path).dryrun(JobSpec.create(name="cpu", nodes=2), PROGRAM)
    assert isinstance(plan.request, LocalRequest)
    for node in plan.request.nodes:
        agent = node.argv[: node.argv.index("--")]
        assert agent[-4:-2] == ("--gpu-sampling", "off"), node.argv


@pytest.mark.parametrize("gpus", [0, 1])
def test_a_cluster_cpu_jobs_agents_sample_no_gpu_and_a_gpu_jobs_do(gpus: int) -> None:
    """Every pod's agent of a PyTorchJob that asked for no GPU runs with ``--gpu-sampling off``;
    one that asked for GPUs samples them (the default, ``auto``)."""
    spec = JobSpec.create(
        name="cpu", nodes=2, namespace="ml", image="base:1", resources={"gpus": gpus}
    )
    [job] = [o for o in job_objects(spec, CodeSource(image=REF)) if o["kind"] == "PyTorchJob"]
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        command = replica["template"]["spec"]["containers"][0]["command"]
        agent = command[: command.index("--")]
        assert ("--gpu-sampling" in agent) == (not gpus), command


@pytest.mark.parametrize("kind", sorted(KIND_TABLE))
def test_hang_after_travels_on_every_kinds_job_for_readers_that_follow_nothing(kind: str) -> None:
    """``--hang-after`` is on the job (an annotation), so a detached job's hang is said by the
    user's limit wherever its status is read; no limit, no annotation."""
    from jupyter_ktrain.backends.kubernetes.labels import HANG_AFTER_ANNOTATION

    spec = JobSpec.create(name="h", kind=kind, nodes=2, image="base:1", hang_after="8s")
    job = job_objects(spec, CodeSource(image=REF), cell="c", service_monitor=False)[-1]
    assert job["metadata"]["annotations"][HANG_AFTER_ANNOTATION] == "8"
    plain = dataclasses.replace(spec, hang_after=None)
    job = job_objects(plain, CodeSource(image=REF), cell="c", service_monitor=False)[-1]
    assert HANG_AFTER_ANNOTATION not in (job["metadata"].get("annotations") or {})
