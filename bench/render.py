"""Render + validate a 64-node x 8-GPU PyTorchJob with every option on.

Goals: rendering under 50 ms; a second validation compiles no schema (cached) and so costs a
fraction of the first. Peer, measured in the same run: validating the same object the
uncached way, i.e. loading the CRD YAML and building a jsonschema validator each time plus
kubernetes-validate's own ``validate()`` (which re-reads its schemas on every call) for each
pod template. Prints the figures; the last line is JSON with each goal beside it.
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml
from jsonschema import Draft7Validator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from jupyter_ktrain.backends.kubernetes.plans import validate
from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, render
from jupyter_ktrain.frontends.cli_render import build_parser, spec_from_args

FLAGS = (
    "--name llm-64x8 --namespace ml --nodes 64 --gpus-per-node 8 "
    "--image nvcr.io/nvidia/pytorch:24.03-py3 --cpu 96 --memory 1000Gi --memory-limit 1000Gi "
    "--rdma infiniband --host-network --deepspeed zero3 --bf16 --micro-batch 2 --grad-accum 8 "
    "--offload-optimizer cpu --offload-param cpu --dataset datasets/llm:/data:ro "
    "--checkpoints ckpt:/checkpoints --volume cache=hf-cache:/cache --shm 256Gi "
    "--secret-env HF_TOKEN=hf-token/token --env-from-secret wandb --env OMP_NUM_THREADS=8 "
    "--node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 "
    "--toleration nvidia.com/gpu:NoSchedule --affinity '{podAntiAffinity: "
    "{requiredDuringSchedulingIgnoredDuringExecution: [{topologyKey: kubernetes.io/hostname, "
    "labelSelector: {matchLabels: {ktrain.io/job: llm-64x8}}}]}}' --priority-class high "
    "--gang volcano --queue research --service-account trainer --image-pull-secret ngc "
    "--init-container 'fetch=amazon/aws-cli aws s3 sync s3://b/llm /data' "
    "--restart-policy ExitCode --backoff-limit 3 --ttl 3600 --active-deadline 172800 "
    "--clean-pod-policy Running --label team=llm"
)
CRD = Path(validate.__file__).resolve().parents[2] / "crds" / "kubeflow.org_pytorchjobs.yaml"


def ms(f: Any, repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def peer_validate(obj: dict[str, Any]) -> None:
    """Uncached: parse the CRD, build a validator, and kubernetes-validate each pod."""
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    Draft7Validator(schema).validate(obj)
    for _, template in validate.pod_templates(obj):
        pod = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "x"},
            "template": template,
        }
        kubernetes_validate.validate(pod, validate.K8S_SCHEMA_VERSION, strict=True)


def main() -> None:
    ns = build_parser().parse_args(shlex.split(FLAGS))
    spec_ms, spec = ms(lambda: spec_from_args(ns), 20)
    render_ms, rendered = ms(lambda: render(spec, CodeSource(), cell="bench"), 50)
    t = time.perf_counter()
    validate.validate_objects(rendered.objects)
    first_ms = (time.perf_counter() - t) * 1000
    compiled = validate.schema_compilations()
    second_ms, _ = ms(lambda: validate.validate_objects(rendered.objects), 10)
    recompiled = validate.schema_compilations() - compiled
    peer_ms, _ = ms(lambda: peer_validate(rendered.job), 3)
    n_replicas = sum(r["replicas"] for r in rendered.job["spec"]["pytorchReplicaSpecs"].values())
    print(f"job: {rendered.job['kind']} {n_replicas} replicas x 8 GPUs, every option on")
    print(f"flags -> JobSpec:             {spec_ms:8.2f} ms")
    print(f"render (objects + ds_config): {render_ms:8.2f} ms  (goal < 50 ms)")
    print(f"validate, first (compiles):   {first_ms:8.2f} ms  ({compiled} schemas)")
    print(f"validate, cached:             {second_ms:8.2f} ms  ({recompiled} recompiled)")
    print(f"peer: uncached jsonschema + kubernetes-validate: {peer_ms:8.2f} ms")
    print(
        json.dumps(
            {
                "render_ms": round(render_ms, 3),
                "render_ms_goal": "<50",
                "validate_cached_ms": round(second_ms, 2),
                "validate_first_ms": round(first_ms, 1),
                "schema_compilations_second_job": recompiled,
                "schema_compilations_second_job_goal": "==0",
                "peer_uncached_validate_ms": round(peer_ms, 1),
                "speedup_vs_uncached_peer": round(peer_ms / second_ms, 1),
                "speedup_vs_uncached_peer_goal": ">=10",
            }
        )
    )


if __name__ == "__main__":
    main()
