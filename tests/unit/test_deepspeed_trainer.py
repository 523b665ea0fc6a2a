"""``--deepspeed zeroN`` with the Transformers Trainer: a config Transformers accepts against the
program's ``TrainingArguments``, and the batch check using the flags and the arguments both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.spec.deepspeed import (
    build_config,
    config_bytes,
    resolve_deepspeed,
    trainer_arguments,
)

PROGRAM = """
import transformers
MICRO = 8
ACCUM = 2

def finetune(lr):
    args = transformers.TrainingArguments(
        output_dir="out",
        per_device_train_batch_size=MICRO,
        gradient_accumulation_steps=ACCUM,
        max_grad_norm=0.5,
        learning_rate=lr,
        use_cpu=True,
        report_to="none",
    )
    return args
"""


def test_the_program_s_training_arguments_are_read_where_they_are_literal() -> None:
    found = trainer_arguments(PROGRAM)
    assert found is not None
    assert (found.per_device_train_batch_size, found.gradient_accumulation_steps) == (8, 2)
    assert (found.max_grad_norm, found.bf16, found.deepspeed) == (0.5, None, None)
    assert trainer_arguments("import torch\ntrain()\n") is None  # no Trainer: not ours
    dynamic = trainer_arguments("TrainingArguments(per_device_train_batch_size=batch())")
    assert dynamic is not None
    assert dynamic.per_device_train_batch_size is None  # known only in the job


def _transformers_accepts(config: dict[str, object], tmp_path: Path) -> dict[str, object]:
    """What Transformers does with our config at Trainer start (single process)."""
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from transformers import TrainingArguments
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        max_grad_norm=0.5,
        use_cpu=True,
        report_to="none",
    )
    hf = HfTrainerDeepSpeedConfig(json.loads(json.dumps(config)))
    hf.trainer_config_process(args)
    assert hf.mismatches == []  # Transformers raises these at trainer_config_finalize
    filled: dict[str, object] = hf.config
    return filled


def test_a_generated_config_is_auto_where_transformers_fills_values(tmp_path: Path) -> None:
    ds = resolve_deepspeed("zero3")
    config = json.loads(config_bytes(ds, 1, PROGRAM))
    assert config["train_micro_batch_size_per_gpu"] == "auto"
    assert config["gradient_accumulation_steps"] == "auto"
    assert config["train_batch_size"] == "auto"
    assert config["gradient_clipping"] == "auto"
    assert config["bf16"] == {"enabled": "auto"}
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    filled = _transformers_accepts(config, tmp_path)
    assert (filled["train_batch_size"], filled["gradient_clipping"]) == (16, 0.5)
    # without TrainingArguments in the program the config stays DeepSpeed's own, all explicit
    plain = build_config(ds, 1)
    assert plain["train_batch_size"] == 1
    assert "auto" not in json.dumps(plain)


def test_flags_that_agree_are_written_out_and_transformers_accepts_them(tmp_path: Path) -> None:
    ds = resolve_deepspeed("zero2", micro_batch=8, grad_accum=2)
    config = json.loads(config_bytes(ds, 1, PROGRAM))
    assert (config["train_micro_batch_size_per_gpu"], config["train_batch_size"]) == (8, 16)
    _transformers_accepts(config, tmp_path)


def test_a_flag_that_contradicts_training_arguments_is_refused_with_the_fixes() -> None:
    with pytest.raises(SpecError) as err:
        config_bytes(resolve_deepspeed("zero3", micro_batch=4), 2, PROGRAM)
    message = str(err.value)
    assert "--micro-batch 4 disagrees with TrainingArguments(per_device_train_batch_size=8)" in (
        message
    )
    assert "drop --micro-batch" in message
    assert "set per_device_train_batch_size=4" in message


def test_the_batch_check_uses_the_training_arguments_when_no_flag_says_it() -> None:
    # the seed's mistake, Trainer flavour: 64 = 8 x 2 x world needs 4 ranks, not 2
    with pytest.raises(SpecError) as err:
        config_bytes(resolve_deepspeed("zero3", train_batch_size=64), 2, PROGRAM)
    assert "train_batch_size 64 != micro batch 8 x gradient accumulation 2 x world size 2" in (
        str(err.value)
    )
    config = json.loads(config_bytes(resolve_deepspeed("zero3", train_batch_size=32), 2, PROGRAM))
    assert config["train_batch_size"] == 32
