"""DeepSpeed: ``--deepspeed zero1|zero2|zero3|PATH`` to a config file shipped with the job.

:func:`resolve_deepspeed` turns the flag (and the flags that tune it) into a
:class:`~jupyter_ktrain.spec.DeepSpeed`; :func:`build_config` turns that into the JSON that
every rank reads from ``/ktrain/ds_config.json`` (``KTRAIN_DEEPSPEED_CONFIG``). DeepSpeed is
started by torchrun in every replica: no SSH, no hostfile. Batch arithmetic is checked by the
spec itself (:meth:`DeepSpeed.check_batch`) before anything is rendered.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ...errors import SpecError
from ...launch import CODE_DIR
from ...spec import DeepSpeed

__all__ = ["CONFIG_ENV", "CONFIG_FILE", "build_config", "config_bytes", "resolve_deepspeed"]

CONFIG_FILE = "ds_config.json"
CONFIG_ENV = "KTRAIN_DEEPSPEED_CONFIG"
CONFIG_PATH = f"{CODE_DIR}/{CONFIG_FILE}"

_STAGES = {"zero0": 0, "zero1": 1, "zero2": 2, "zero3": 3}


def resolve_deepspeed(value: str, **flags: Any) -> DeepSpeed:
    """``zeroN`` -> a generated config; anything else is a JSON file path (read here).

    ``flags`` are :class:`DeepSpeed` fields given explicitly (``None`` values are ignored);
    with a file they override its values.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    if value in _STAGES:
        return DeepSpeed(stage=_STAGES[value], **given)
    path = Path(value)
    try:
        config = json.loads(path.read_text())
    except OSError as exc:
        raise SpecError(
            f"--deepspeed {value!r} is neither zero1, zero2, zero3 nor a readable config file "
            f"({exc.strerror})."
        ) from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"--deepspeed {value}: not valid JSON ({exc}).") from None
    if not isinstance(config, dict):
        raise SpecError(f"--deepspeed {value}: the file must hold a JSON object.")
    return DeepSpeed(config=config, source=os.path.basename(value), **given)


def _offload(device: str) -> dict[str, Any]:
    out: dict[str, Any] = {"device": device}
    if device == "cpu":
        out["pin_memory"] = True
    if device == "nvme":
        out["nvme_path"] = "/local_nvme"
    return out


def _generated(ds: DeepSpeed) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": ds.stage}
    if ds.stage and ds.stage >= 2:
        zero["offload_optimizer"] = _offload(ds.offload_optimizer)
    if ds.stage == 3:
        zero["offload_param"] = _offload(ds.offload_param)
    zero.update(
        overlap_comm=True,
        contiguous_gradients=True,
        reduce_scatter=True,
        reduce_bucket_size=ds.reduce_bucket_size,
        allgather_bucket_size=ds.allgather_bucket_size,
    )
    out: dict[str, Any] = {}
    if ds.precision:
        out[ds.precision] = {"enabled": True}
    out["zero_optimization"] = zero
    return out


def build_config(ds: DeepSpeed, world_size: int) -> dict[str, Any]:
    """The DeepSpeed JSON for a job of ``world_size`` ranks (batch sizes made explicit)."""
    out = dict(ds.config) if ds.config is not None else _generated(ds)
    micro, accum, total = ds.batch_numbers()
    micro, accum = micro or 1, accum or 1
    if ds.config is not None:
        if ds.precision:
            for other in ("bf16", "fp16"):
                out.pop(other, None)
            out[ds.precision] = {"enabled": True}
        if ds.stage is not None:
            out["zero_optimization"] = {**out.get("zero_optimization", {}), "stage": ds.stage}
    if ds.config is None or ds.micro_batch or ds.grad_accum or ds.train_batch_size:
        out["gradient_accumulation_steps"] = accum
        out["train_micro_batch_size_per_gpu"] = micro
        out["train_batch_size"] = total or micro * accum * world_size
    if ds.config is None:
        if ds.gradient_clipping is not None:
            out["gradient_clipping"] = ds.gradient_clipping
        out["wall_clock_breakdown"] = False
        comm = ds.communication_data_type or ds.precision
        if comm:
            out["communication_data_type"] = comm
    return out


def config_bytes(ds: DeepSpeed, world_size: int) -> bytes:
    """:func:`build_config` as the bytes of ``ds_config.json`` (stable key order)."""
    return (json.dumps(build_config(ds, world_size), indent=2) + "\n").encode()
