"""Bad input: each case gives one SpecError naming the flag and the fix, before rendering
finishes (nothing is created)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from jupyter_ktrain.backends.kubernetes.plans.manifests import render
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.flags import spec_from_yaml
from jupyter_ktrain.frontends.cli_render import build_parser, spec_from_args

SEED_DS = Path(__file__).resolve().parents[1] / "data" / "seed-manifests" / "ds_config.json"
BASE = "--name job --nodes 4 --gpus-per-node 8 --image img:1 "

# (flags, words the one message must contain: the flag, and the fix)
CASES = [
    ("--elastic 8:2", ["--elastic 8:2", "MIN:MAX", "--elastic 2:8"]),
    ("--elastic 2:3 --nodes 4", ["--nodes 4", "--elastic 2:3", "between"]),
    ("--elastic two", ["--elastic", "MIN:MAX", "2:8"]),
    ("--kind TFJob --elastic 2:4", ["--elastic", "--kind PyTorchJob"]),
    ("--max-restarts 3 --backoff-limit 2", ["--max-restarts", "--backoff-limit"]),
    ("--deepspeed zero3 --bf16 --fp16", ["--bf16", "--fp16", "pick one"]),
    ("--micro-batch 2", ["--micro-batch", "--deepspeed"]),
    ("--bf16", ["--bf16", "--deepspeed"]),
    ("--deepspeed zero2 --offload-param cpu", ["--offload-param", "zero3"]),
    ("--deepspeed zero3 --micro-batch 0", ["--micro-batch", "at least 1"]),
    ("--deepspeed nosuch.json", ["--deepspeed", "zero1, zero2, zero3"]),
    ("--kind MPIJob --deepspeed zero3", ["--deepspeed", "--kind"]),
    (
        "--deepspeed zero3 --micro-batch 2 --grad-accum 8 --train-batch-size 64",
        ["--train-batch-size", "--train-batch-size 512", "--micro-batch 2 --grad-accum 1"],
    ),
    ("--queue research", ["--queue", "--gang volcano", "--kueue-queue"]),
    ("--gang volcano --kueue-queue q", ["--gang volcano", "--kueue-queue", "pick one"]),
    ("--dataset imagenet", ["--dataset", "CLAIM:/path", ":ro"]),
    ("--dataset imagenet:data", ["--dataset", "absolute"]),
    ("--dataset Big_Claim:/data", ["--dataset", "PersistentVolumeClaim name"]),
    ("--volume x:/dev/shm", ["--volume", "--shm"]),
    ("--volume a:/data --volume b:/data", ["/data", "different path"]),
    ("--shm 64GB", ["--shm", "64Gi"]),
    ("--toleration nvidia.com/gpu:NoScheduled", ["--toleration", "NoSchedule"]),
    ("--secret-env HF_TOKEN=hf-token", ["--secret-env", "NAME=SECRET/KEY"]),
    ("--secret-env 1BAD=s/k", ["--secret-env", "environment variable"]),
    ("--env HF_TOKEN=x --secret-env HF_TOKEN=hf/token", ["--env", "--secret-env", "keep one"]),
    (
        "--gpus-per-node 16 --node-selector node.kubernetes.io/instance-type=p4d.24xlarge",
        ["--gpus-per-node 16", "p4d.24xlarge", "8 GPU(s)", "--gpus-per-node 8"],
    ),
    ("--node-selector nvidia.com/gpu.count=4", ["--gpus-per-node 8", "gpu.count=4"]),
    ("--procs-per-node 16", ["--procs-per-node 16", "--gpus-per-node 8"]),
    (
        "--kind TrainJob --priority-class high",
        ["--kind TrainJob", "--priority-class", "--kind PyTorchJob"],
    ),
    ("--kind TrainJob --ttl 60", ["--kind TrainJob", "--ttl", "ClusterTrainingRuntime"]),
    ("--ps 2", ["--ps 2", "--kind TFJob"]),
    ("--rdma nosuch", ["--rdma 'nosuch'", "infiniband", "roce", "tcp"]),
    ("--host-network", ["--host-network", "--rdma"]),
    ("--affinity '[1, 2]'", ["--affinity", "mapping"]),
    ("--affinity '{nodeAfinity: {}}'", ["--affinity", "nodeAffinity"]),
    ("--label 'bad key=x'", ["--label", "label key"]),
    ("--node-selector pool=bad/value", ["--node-selector", "label value"]),
    ("--init-container fetch", ["--init-container", "NAME=IMAGE"]),
    ("--priority-class High", ["--priority-class", "PriorityClass name"]),
    ("--cpu lots", ["--cpu", "quantity"]),
    ("--active-deadline 0", ["--active-deadline", "at least 1"]),
]


def error_for(flags: str, base: str = BASE) -> SpecError:
    def attempt() -> None:
        render(spec_from_args(build_parser().parse_args(shlex.split(base + flags))))

    with pytest.raises(SpecError) as info:
        attempt()
    return info.value


@pytest.mark.parametrize(("flags", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_message_naming_flag_and_fix(flags: str, words: list[str]) -> None:
    message = str(error_for(flags))
    for word in words:
        assert word in message, f"{word!r} not in: {message}"
    assert message.endswith((".", ")"))
    assert "\n" not in message


def test_missing_image_names_the_flag() -> None:
    message = str(error_for("", base="--name job --nodes 2"))
    assert "--image" in message


def test_the_seed_deepspeed_config_at_4x8_offers_the_three_consistent_fixes() -> None:
    message = str(error_for(f"--deepspeed {SEED_DS}"))
    assert "train_batch_size 64 != micro batch 2 x gradient accumulation 8 x world size 32" in (
        message
    )
    assert "(1) --train-batch-size 512" in message
    assert "(2) --micro-batch 2 --grad-accum 1" in message
    assert "(3) a world size of 4" in message


@pytest.mark.parametrize(
    "flags",
    ["--train-batch-size 512", "--micro-batch 2 --grad-accum 1", "--nodes 4 --procs-per-node 1"],
)
def test_each_offered_fix_is_accepted(flags: str) -> None:
    spec = spec_from_args(
        build_parser().parse_args(shlex.split(f"{BASE} --deepspeed {SEED_DS} {flags}"))
    )
    assert "ds_config.json" in render(spec).files


def test_yaml_run_policy_typo_names_the_flag() -> None:
    with pytest.raises(SpecError, match=r"--restart-policy 'Sometimes'.*ExitCode"):
        spec_from_yaml("name: j\nrun_policy: {restart_policy: Sometimes}\n")


def test_yaml_unknown_option_lists_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"Unknown job option.*gpus.*Known:.*resources"):
        spec_from_yaml("name: j\ngpus: 8\n")


def test_yaml_that_is_not_a_mapping() -> None:
    with pytest.raises(SpecError, match="must be a YAML mapping"):
        spec_from_yaml("- a\n- b\n")
