"""Golden YAML per kind, every option on; every golden file validates against the schemas.

Regenerate after an intended change with ``KTRAIN_REGEN_GOLDEN=1 pytest tests/unit/
test_manifests_golden.py`` and review the diff like code.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml

from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, render, to_yaml
from jupyter_ktrain.backends.kubernetes.plans.validate import validate_objects
from jupyter_ktrain.frontends.cli_render import build_parser, spec_from_args
from jupyter_ktrain.kinds import KINDS

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
REGEN = os.environ.get("KTRAIN_REGEN_GOLDEN") == "1"

COMMON = (
    "--nodes 4 --gpus-per-node 8 --image nvcr.io/nvidia/pytorch:24.03-py3 --namespace ml "
    "--cpu 32 --memory 256Gi --memory-limit 256Gi --dataset datasets/imagenet:/data:ro "
    "--checkpoints ckpt:/checkpoints --volume cache=hf-cache:/cache "
    "--secret-env HF_TOKEN=hf-token/token --env-from-secret wandb "
    "--node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 "
    "--toleration nvidia.com/gpu:NoSchedule --toleration dedicated=training:NoExecute "
    "--service-account trainer --label team=nlp "
    "--init-container 'fetch=amazon/aws-cli aws s3 sync s3://bucket/imagenet /data' "
    "--env OMP_NUM_THREADS=8"
)
INIT = "--init-container 'fetch=amazon/aws-cli aws s3 sync s3://bucket/imagenet /data' "
COMMON_NO_INIT = COMMON.replace(INIT, "").replace("--env-from-secret wandb ", "")
POD_LEVEL = (
    "--rdma infiniband --host-network --priority-class high "
    "--affinity '{podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
    "[{weight: 100, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: "
    "{matchLabels: {ktrain.io/job: NAME}}}}]}}' "
    "--image-pull-secret ngc --restart-policy ExitCode --backoff-limit 3 --ttl 3600 "
    "--active-deadline 86400 "
    "--clean-pod-policy Running"
)
CASES = {
    "pytorchjob": f"--name bert-ft {COMMON} {POD_LEVEL} --deepspeed zero3 --bf16 "
    "--micro-batch 2 --grad-accum 8 --offload-optimizer cpu --gang volcano --queue research",
    "pytorchjob-elastic": f"--name llm-elastic {COMMON} {POD_LEVEL} --elastic 2:8 "
    "--max-restarts 3 --deepspeed zero2 --fp16 --kueue-queue team-a",
    "tfjob": f"--kind TFJob --name tf-mw {COMMON} {POD_LEVEL} --ps 2 --gang volcano",
    "mpijob": f"--kind MPIJob --name hvd {COMMON} --rdma roce --priority-class high "
    "--image-pull-secret ngc "
    "--restart-policy OnFailure --clean-pod-policy Running --ttl 3600",
    "xgboostjob": f"--kind XGBoostJob --name xgb {COMMON} --rdma tcp --priority-class high "
    "--restart-policy ExitCode --backoff-limit 2",
    "rayjob": f"--kind RayJob --name ray-tune {COMMON} --rdma infiniband --image-pull-secret ngc "
    "--ttl 600 --active-deadline 3600 --kueue-queue team-a",
    "trainjob": f"--kind TrainJob --name llama-ft {COMMON_NO_INIT} --rdma infiniband "
    "--image-pull-secret ngc --deepspeed zero3 "
    "--bf16 --micro-batch 1 --kueue-queue team-a --runtime torch-distributed",
}


def rendered_yaml(case: str) -> str:
    flags = CASES[case].replace("NAME", case)
    spec = spec_from_args(build_parser().parse_args(shlex.split(flags)))
    code = CodeSource.configmap(f"{spec.name}-code") if case == "tfjob" else CodeSource()
    return to_yaml(render(spec, code, cell="c0ffee12").objects)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_matches_the_golden_file(case: str) -> None:
    path = GOLDEN / f"{case}.yaml"
    text = rendered_yaml(case)
    if REGEN:
        path.write_text(text)
    assert path.exists(), f"missing {path.name}: run with KTRAIN_REGEN_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} changed; regenerate and review the diff"


@pytest.mark.parametrize("path", sorted(GOLDEN.glob("*.yaml")), ids=lambda p: p.name)
def test_every_golden_file_validates(path: Path) -> None:
    objects = list(yaml.safe_load_all(path.read_text()))
    assert objects
    validate_objects(objects)


def test_golden_files_cover_every_kind() -> None:
    kinds = {o["kind"] for p in GOLDEN.glob("*.yaml") for o in yaml.safe_load_all(p.read_text())}
    assert kinds == set(KINDS)
