"""This machine's GPUs for local jobs: which the kernel may use (NVML, narrowed by its
``CUDA_VISIBLE_DEVICES``) and each node's share of them, as environment."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ...errors import SpecError

if TYPE_CHECKING:
    from ...pod.agent.sampler import GpuInfo
    from ...spec.job import JobSpec

__all__ = ["machine_gpus", "split_gpus"]


def machine_gpus() -> list[GpuInfo]:
    """This machine's GPUs that the kernel may use: NVML's list narrowed by the kernel's own
    ``CUDA_VISIBLE_DEVICES``. Raises :class:`SpecError` when NVML cannot tell."""
    from ...pod.agent.sampler import list_gpus, select_gpus

    try:
        found = list_gpus()
    except Exception as exc:
        raise SpecError(
            f"--gpus-per-node needs NVML to find this machine's GPUs, and it cannot "
            f"({type(exc).__name__}: {exc}): install the NVIDIA driver and nvidia-ml-py "
            "(pip install 'jupyter-ktrain[gpu]'), or drop --gpus-per-node to run on CPU."
        ) from None
    return select_gpus(found, os.environ)


def split_gpus(spec: JobSpec, gpus: list[GpuInfo]) -> list[dict[str, str]]:
    """Each node's share of ``gpus`` (NVML order) as environment: CUDA_VISIBLE_DEVICES by
    index in PCI bus order (CUDA's default order differs from NVML's) and the UUIDs for the
    agent's sampler. Raises :class:`SpecError` when the machine has too few."""
    per_node = spec.resources.gpus
    if not per_node:
        return [{} for _ in range(spec.nodes)]
    need = per_node * spec.nodes
    if need > len(gpus):
        raise SpecError(
            f"--nodes {spec.nodes} x --gpus-per-node {per_node} needs {need} GPUs, but this "
            f"machine has {len(gpus)} for the kernel: lower --nodes or --gpus-per-node "
            f"(local nodes share one machine), or run on --backend kubernetes."
        )
    from ...pod.agent.sampler import GPU_UUIDS_ENV

    out = []
    for node in range(spec.nodes):
        mine = gpus[node * per_node : (node + 1) * per_node]
        out.append(
            {
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                "CUDA_VISIBLE_DEVICES": ",".join(str(g.nvml_index) for g in mine),
                GPU_UUIDS_ENV: ",".join(g.uuid for g in mine),
            }
        )
    return out
