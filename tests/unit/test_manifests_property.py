"""Property: any spec JobSpec accepts renders to objects that validate against the CRD and
Kubernetes schemas (and the operator's own rules)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, render
from jupyter_ktrain.backends.kubernetes.plans.validate import validate_objects
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.spec.deepspeed import resolve_deepspeed
from jupyter_ktrain.spec.job import JobSpec
from jupyter_ktrain.spec.rdma import resolve_profile

names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
mounts = st.builds(
    lambda claim, path, ro: f"{claim}:/{path}{':ro' if ro else ''}",
    names,
    st.sampled_from(["data", "ckpt", "cache", "models"]),
    st.booleans(),
)


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["PyTorchJob", "TFJob", "MPIJob", "TrainJob"]))
    nodes = draw(st.integers(1, 64))
    gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
    kw: dict[str, Any] = {
        "name": draw(names),
        "kind": kind,
        "nodes": nodes,
        "backend": "kubernetes",
        "image": draw(st.sampled_from(["img:1", "nvcr.io/nvidia/pytorch:24.03-py3"])),
        "resources": {
            "gpus": gpus,
            "cpu": draw(st.sampled_from([None, "4", "500m"])),
            "memory": draw(st.sampled_from([None, "16Gi"])),
            "memory_limit": draw(st.sampled_from([None, "32Gi"])),
        },
        "env": draw(
            st.dictionaries(
                st.from_regex(r"[A-Z][A-Z0-9_]{0,5}", fullmatch=True),
                st.text(max_size=5),
                max_size=3,
            )
        ),
        "namespace": draw(st.sampled_from([None, "ml"])),
        "storage": {
            "mounts": draw(st.lists(mounts, max_size=3)),
            "shm": draw(st.sampled_from(["auto", "none", "16Gi"])),
        },
        "scheduling": {
            "node_selector": draw(
                st.dictionaries(st.sampled_from(["pool", "zone"]), names, max_size=2)
            ),
            "tolerations": draw(
                st.lists(
                    st.sampled_from(
                        ["nvidia.com/gpu:NoSchedule", "dedicated=ml:NoExecute", "spot"]
                    ),
                    max_size=2,
                )
            ),
            "gang": draw(st.sampled_from([None, "volcano"])),
            "service_account": draw(st.sampled_from([None, "trainer"])),
        },
        "secret_env": draw(
            st.lists(st.sampled_from(["HF_TOKEN=hf/token", "WANDB_KEY=wb/key"]), max_size=1)
        ),
        "run_policy": {
            "restart_policy": draw(st.sampled_from(["OnFailure", "Never", "ExitCode"])),
            "ttl_seconds_after_finished": draw(st.sampled_from([None, 600])),
        },
    }
    if draw(st.booleans()):
        kw["rdma"] = resolve_profile(draw(st.sampled_from(["infiniband", "roce", "tcp"])))
    if kind == "PyTorchJob" and draw(st.booleans()):
        lo = draw(st.integers(1, nodes))
        kw["elastic"] = f"{lo}:{draw(st.integers(nodes, nodes + 8))}"
    if kind in ("PyTorchJob", "TrainJob") and draw(st.booleans()):
        kw["deepspeed"] = resolve_deepspeed(
            draw(st.sampled_from(["zero1", "zero2", "zero3"])),
            precision=draw(st.sampled_from([None, "bf16", "fp16"])),
            micro_batch=draw(st.integers(1, 4)),
            grad_accum=draw(st.integers(1, 8)),
        )
    if kind == "TFJob":
        kw["ps_replicas"] = draw(st.integers(0, 2))
    return kw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(), st.booleans())
def test_any_accepted_spec_renders_to_valid_objects(kw: dict[str, Any], configmap: bool) -> None:
    try:
        spec = JobSpec.create(**kw)
        code = CodeSource.configmap(f"{spec.name}-code") if configmap else CodeSource()
        rendered = render(spec, code)
    except SpecError:
        assume(False)
        return
    validate_objects(rendered.objects)
    job = rendered.job
    assert job["kind"] == spec.kind
    assert job["metadata"]["labels"]["ktrain.io/job"] == spec.name
    assert ("ds_config.json" in rendered.files) == (spec.deepspeed is not None)
