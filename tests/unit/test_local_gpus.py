"""The local backend on a GPU machine: each node gets its own GPUs (CUDA by index in PCI
order, the agent's sampler by UUID), a job wanting more GPUs than the machine has is refused,
and --rdma (a pod network setting) changes nothing locally (no NCCL debug, no RDMA alert)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from jupyter_ktrain.backends.base import Job
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.monitor.live import model_for
from jupyter_ktrain.pod.agent.sampler import GpuInfo, select_gpus
from jupyter_ktrain.spec.job import JobSpec
from jupyter_ktrain.spec.rdma import resolve_profile

# a 4 x H100 machine as NVML lists it (PCI bus order)
MACHINE = [GpuInfo(i, f"GPU-{i}a2b3c4d-0000-1111-2222-33334444555{i}") for i in range(4)]
PROGRAM = SimpleNamespace(files={"program.py": b"print('hi')\n"}, source="print('hi')\n")


def _plan(tmp_path: Path, **spec: object) -> tuple[LocalBackend, object]:
    backend = LocalBackend(tmp_path, gpus=lambda: list(MACHINE))
    return backend, backend.dryrun(JobSpec.create(name="g", **spec), PROGRAM)


def test_each_local_node_gets_its_own_gpus_and_samples_only_those(tmp_path: Path) -> None:
    _, plan = _plan(tmp_path, nodes=2, resources={"gpus": 2})
    envs = [n.env for n in plan.request.nodes]  # type: ignore[attr-defined]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3"]
    assert {e["CUDA_DEVICE_ORDER"] for e in envs} == {"PCI_BUS_ID"}
    assert [e["PET_NPROC_PER_NODE"] for e in envs] == ["2", "2"]  # one process per GPU
    # what each node's agent samples: its own two GPUs, never the other node's
    sampled = [[g.uuid for g in select_gpus(MACHINE, e)] for e in envs]
    assert sampled == [[MACHINE[0].uuid, MACHINE[1].uuid], [MACHINE[2].uuid, MACHINE[3].uuid]]


def test_more_gpus_than_the_machine_has_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        _plan(tmp_path, nodes=3, resources={"gpus": 2})
    message = str(err.value)
    assert "needs 6 GPUs, but this machine has 4" in message
    assert "lower --nodes or --gpus-per-node" in message


def test_no_gpus_asked_means_no_split_and_no_nvml_call(tmp_path: Path) -> None:
    def boom() -> list[GpuInfo]:
        raise AssertionError("NVML asked for a CPU job")

    plan = LocalBackend(tmp_path, gpus=boom).dryrun(JobSpec.create(name="c", nodes=2), PROGRAM)
    assert all("CUDA_VISIBLE_DEVICES" not in n.env for n in plan.request.nodes)


def test_rdma_on_the_local_backend_is_only_a_note(tmp_path: Path) -> None:
    backend, plan = _plan(tmp_path, nodes=2, rdma=resolve_profile("infiniband"))
    assert plan.notes == ("local run: --rdma apply on --backend kubernetes only",)  # type: ignore[attr-defined]
    for node in plan.request.nodes:  # type: ignore[attr-defined]
        assert "KTRAIN_RDMA" not in node.env  # so the agent sets no NCCL_DEBUG=INFO
        assert "NCCL_IB_HCA" not in node.env
    model = model_for(Job("g", backend, plan))  # type: ignore[arg-type]
    assert model.rdma_requested is False
