"""One spec front end: the same job written as ``%%ktrain`` flags, as ``ktrain render`` flags
and as a YAML job file is the same :class:`JobSpec`, and both commands offer the same job
flags."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.flags import (
    JOB_FLAGS,
    build_parser,
    parse_flags,
    spec_from_args,
    spec_from_yaml,
)
from jupyter_ktrain.frontends import cli_render
from jupyter_ktrain.spec.job import JobSpec

FLAGS = (
    "--name llm-ft --nodes 4 --image nvcr.io/nvidia/pytorch:24.03-py3 --namespace ai "
    "--label team=nlp --label tier=gold --gpus-per-node 8 --cpu 32 --memory 256Gi "
    "--rdma roce --host-network --deepspeed zero3 --bf16 --micro-batch 2 --grad-accum 8 "
    "--offload-optimizer cpu --grad-clip 0.5 "
    "--dataset ds-pvc:/data:ro --checkpoints ckpt-pvc/run1:/ckpt --volume extra=cache:/cache "
    "--shm 64Gi --env OMP_NUM_THREADS=8 --env HF_HOME=/data/hf "
    "--secret-env HF_TOKEN=hf-token/token --env-from-secret wandb "
    "--elastic 2:8 --max-restarts 5 "
    "--node-selector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB "
    "--toleration nvidia.com/gpu:NoSchedule "
    "--affinity '{nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: []}}' "
    "--priority-class high --kueue-queue team-q --service-account trainer "
    "--image-pull-secret regcred --init-container 'fetch=busybox:1 sh -c true' "
    "--metrics-port 9400 --ttl 600 --active-deadline 7200 --clean-pod-policy Running"
)

YAML = """
name: llm-ft
nodes: 4
image: nvcr.io/nvidia/pytorch:24.03-py3
namespace: ai
labels: {team: nlp, tier: gold}
resources: {gpus: 8, cpu: "32", memory: 256Gi}
rdma: {preset: roce, host_network: true}
deepspeed:
  preset: zero3
  precision: bf16
  micro_batch: 2
  grad_accum: 8
  offload_optimizer: cpu
  gradient_clipping: 0.5
storage:
  dataset: ds-pvc:/data:ro
  checkpoints: ckpt-pvc/run1:/ckpt
  mounts: [extra=cache:/cache]
  shm: 64Gi
env: {OMP_NUM_THREADS: "8", HF_HOME: /data/hf}
secret_env: [HF_TOKEN=hf-token/token]
env_from_secrets: [wandb]
elastic: "2:8"
max_restarts: 5
scheduling:
  node_selector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}
  tolerations: [nvidia.com/gpu:NoSchedule]
  affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: []}}
  priority_class: high
  kueue_queue: team-q
  service_account: trainer
  image_pull_secrets: [regcred]
  init_containers: [fetch=busybox:1 sh -c true]
metrics_port: 9400
run_policy:
  ttl_seconds_after_finished: 600
  active_deadline_seconds: 7200
  clean_pod_policy: Running
backend: kubernetes
"""


def from_render(flags: str) -> JobSpec:
    return cli_render.spec_from_args(cli_render.build_parser().parse_args(shlex.split(flags)))


def test_the_same_job_as_magic_flags_render_flags_and_yaml_is_one_spec() -> None:
    magic = spec_from_args(parse_flags(f"--backend kubernetes {FLAGS}"))
    render = from_render(FLAGS)
    from_yaml = spec_from_yaml(YAML)
    assert magic == render == from_yaml
    # and the values arrived where the flags say (not all three wrong alike)
    assert from_yaml.rdma is not None
    assert from_yaml.rdma.name == "roce"
    assert from_yaml.rdma.host_network
    assert from_yaml.deepspeed is not None
    assert from_yaml.deepspeed.stage == 3
    assert from_yaml.deepspeed.gradient_clipping == 0.5
    assert [
        (m.volume_name, m.claim, m.sub_path, m.read_only) for m in from_yaml.storage.mounts
    ] == [
        ("datasets", "ds-pvc", None, True),
        ("checkpoints", "ckpt-pvc", "run1", False),
        ("extra", "cache", None, False),
    ]
    assert from_yaml.elastic is not None
    assert from_yaml.elastic.max_restarts == 5
    assert from_yaml.run_policy.max_restarts == 5
    assert from_yaml.scheduling.init_containers[0].command == ("sh", "-c", "true")
    assert from_yaml.env_dict == {"OMP_NUM_THREADS": "8", "HF_HOME": "/data/hf"}


def test_render_flags_win_over_the_yaml_file(tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(YAML)
    spec = from_render(f"-f {spec_file} --nodes 6 --cpu 48 --deepspeed zero2 --fp16")
    assert (spec.nodes, spec.resources.cpu, spec.resources.memory) == (6, "48", "256Gi")
    assert spec.deepspeed is not None  # the flags' deepspeed fields over the file's
    assert (spec.deepspeed.stage, spec.deepspeed.precision, spec.deepspeed.micro_batch) == (
        2,
        "fp16",
        2,
    )


def test_a_config_file_named_in_yaml_is_read_beside_it(tmp_path: Path) -> None:
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 4}))
    (tmp_path / "job.yaml").write_text("name: j\ndeepspeed: {file: ds.json, grad_accum: 2}\n")
    spec = spec_from_yaml(tmp_path / "job.yaml")
    assert spec.deepspeed is not None
    assert spec.deepspeed.source == "ds.json"
    assert spec.deepspeed.batch_numbers()[:2] == (4, 2)


def test_both_commands_offer_every_job_flag() -> None:
    every = {flag.name for _, flags in JOB_FLAGS for flag in flags}
    magic_help = build_parser().format_help()
    render_help = cli_render.build_parser().format_help()
    assert [f for f in sorted(every) if f not in magic_help or f not in render_help] == []


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("--label nokey", "--label 'nokey' is not KEY=VALUE"),
        ("--node-selector =x", "--node-selector '=x' is not KEY=VALUE"),
        ("--env =x", "--env '=x' is not KEY=VALUE or KEY"),
    ],
)
def test_one_key_value_type_names_its_flag(line: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        parse_flags(line)


def test_a_yaml_typo_inside_a_part_names_the_part() -> None:
    with pytest.raises(SpecError, match=r"Unknown storage option\(s\): mount\b.*Known:.*mounts"):
        spec_from_yaml("name: j\nstorage: {mount: [a:/a]}\n")
