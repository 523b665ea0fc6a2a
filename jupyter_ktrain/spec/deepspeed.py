"""DeepSpeed: ``--deepspeed zero1|zero2|zero3|PATH`` to a config file shipped with the job.

:func:`resolve_deepspeed` turns the flag (and the flags that tune it) into a
:class:`~jupyter_ktrain.spec.job.DeepSpeed`; :func:`build_config` turns that into the JSON that
every rank reads from ``/ktrain/ds_config.json`` (``KTRAIN_DEEPSPEED_CONFIG``). DeepSpeed is
started by torchrun in every replica: no SSH, no hostfile. Batch arithmetic is checked by the
spec itself (:meth:`DeepSpeed.check_batch`) before anything is rendered.

With the Transformers ``Trainer`` (the program calls ``TrainingArguments(...)``), a generated
config must agree with ``TrainingArguments`` or Transformers refuses it at start. So it says
``"auto"`` wherever Transformers fills the value from the arguments (batch sizes and
accumulation, gradient clipping, bf16/fp16, ZeRO-3 bucket sizes), except where a flag sets it;
:func:`trainer_arguments` reads the literal values of the call (or module constants it names)
from the program, and :func:`check_trainer_batch` refuses a flag that contradicts one, and
batch sizes that no world size can reach, before anything starts. In the job,
``TrainingArguments`` without ``deepspeed=`` gets this config
(:mod:`jupyter_ktrain.pod.integrations`).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..pod.launch import CODE_DIR
from .parts import DeepSpeed

__all__ = [
    "CONFIG_ENV",
    "CONFIG_FILE",
    "TrainerArgs",
    "build_config",
    "check_trainer_batch",
    "config_bytes",
    "resolve_deepspeed",
    "trainer_arguments",
]

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


def build_config(
    ds: DeepSpeed, world_size: int, trainer: TrainerArgs | None = None
) -> dict[str, Any]:
    """The DeepSpeed JSON for a job of ``world_size`` ranks (batch sizes made explicit), or,
    for a program that uses the Transformers Trainer (``trainer``), with ``"auto"`` values."""
    if trainer is not None and ds.config is None:
        return _for_trainer(ds, world_size)
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


def config_bytes(ds: DeepSpeed, world_size: int, program_source: str | None = None) -> bytes:
    """:func:`build_config` as the bytes of ``ds_config.json`` (stable key order).

    ``program_source`` (the captured program) tells whether the Trainer is used; its
    ``TrainingArguments`` are checked against the flags (:func:`check_trainer_batch`)."""
    trainer = trainer_arguments(program_source) if program_source else None
    if trainer is not None:
        check_trainer_batch(ds, trainer, world_size)
    return (json.dumps(build_config(ds, world_size, trainer), indent=2) + "\n").encode()


# -- the Transformers Trainer ---------------------------------------------------------------------
_ARG_CLASSES = ("TrainingArguments", "Seq2SeqTrainingArguments")
_ARG_FLAGS = {
    "per_device_train_batch_size": "--micro-batch",
    "gradient_accumulation_steps": "--grad-accum",
}


@dataclass(frozen=True)
class TrainerArgs:
    """What the program's ``TrainingArguments(...)`` call says, where it says it with a literal
    (or a module constant): None = not known before the job runs."""

    per_device_train_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    bf16: bool | None = None
    fp16: bool | None = None
    max_grad_norm: float | None = None
    deepspeed: str | None = None
    line: int = 0


def trainer_arguments(source: str) -> TrainerArgs | None:
    """The first ``TrainingArguments(...)`` call in ``source`` (None: the program has none)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    constants[target.id] = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    continue
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and _called(call.func) in _ARG_CLASSES:
            return _read_call(call, constants)
    return None


def _called(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else ""


def _read_call(call: ast.Call, constants: dict[str, Any]) -> TrainerArgs:
    found: dict[str, Any] = {}
    names = {f.name for f in dataclasses.fields(TrainerArgs)} - {"line"}
    for kw in call.keywords:
        if kw.arg not in names:
            continue
        if isinstance(kw.value, ast.Name):
            value = constants.get(kw.value.id)
        else:
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = None
        if kw.arg == "deepspeed":
            found[kw.arg] = "given" if value is None else str(value)
        elif value is not None and not isinstance(value, (dict, list, tuple, str)):
            found[kw.arg] = value
    return TrainerArgs(**found, line=call.lineno)


def check_trainer_batch(ds: DeepSpeed, trainer: TrainerArgs, world_size: int) -> None:
    """Refuse what Transformers or DeepSpeed would refuse at start, with the fix."""
    if ds.config is not None:
        return
    for arg, flag in _ARG_FLAGS.items():
        mine = ds.micro_batch if flag == "--micro-batch" else ds.grad_accum
        theirs = getattr(trainer, arg)
        if mine is not None and theirs is not None and mine != theirs:
            raise SpecError(
                f"{flag} {mine} disagrees with TrainingArguments({arg}={theirs}) (line "
                f"{trainer.line} of the program): Transformers would refuse the DeepSpeed config "
                f'at start. Fix one of: (1) drop {flag} (the config then says "auto" and '
                f"Trainer fills in {theirs}); (2) set {arg}={mine} in TrainingArguments."
            )
    if ds.precision is not None and getattr(trainer, ds.precision) is False:
        raise SpecError(
            f"--{ds.precision} but TrainingArguments({ds.precision}=False) (line {trainer.line} "
            f"of the program). Fix one of: (1) drop --{ds.precision}; (2) set "
            f"{ds.precision}=True in TrainingArguments."
        )
    merged = dataclasses.replace(
        ds,
        micro_batch=ds.micro_batch or trainer.per_device_train_batch_size,
        grad_accum=ds.grad_accum or trainer.gradient_accumulation_steps,
    )
    merged.check_batch(world_size, f"{world_size} rank(s)")


def _for_trainer(ds: DeepSpeed, world_size: int) -> dict[str, Any]:
    """A generated config in Transformers' terms: ``"auto"`` unless a flag fixes the value."""
    zero: dict[str, Any] = {"stage": ds.stage}
    if ds.stage and ds.stage >= 2:
        zero["offload_optimizer"] = _offload(ds.offload_optimizer)
    if ds.stage == 3:
        zero["offload_param"] = _offload(ds.offload_param)
        zero.update(
            stage3_prefetch_bucket_size="auto",
            stage3_param_persistence_threshold="auto",
            stage3_gather_16bit_weights_on_model_save=True,  # save_model() writes full weights
        )
    zero.update(overlap_comm=True, contiguous_gradients=True, reduce_bucket_size="auto")
    micro, accum = ds.micro_batch, ds.grad_accum
    total: int | str = ds.train_batch_size or (
        micro * accum * world_size if micro is not None and accum is not None else "auto"
    )
    out: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro if micro is not None else "auto",
        "gradient_accumulation_steps": accum if accum is not None else "auto",
        "train_batch_size": total,
        "gradient_clipping": "auto",
    }
    for precision in ("bf16", "fp16"):
        flag = ds.precision
        out[precision] = {"enabled": "auto" if flag is None else flag == precision}
    out["zero_optimization"] = zero
    out["wall_clock_breakdown"] = False
    if ds.communication_data_type:
        out["communication_data_type"] = ds.communication_data_type
    return out
