"""The kind table (:mod:`jupyter_ktrain.kinds`) agrees with the CRDs it names and the
builders it registers: adding a kind is one entry plus its builder, and this says when the
entry is wrong."""

from __future__ import annotations

import json

import pytest
import yaml

from jupyter_ktrain.backends.kubernetes.plans.builders import BUILDERS, builder
from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, render
from jupyter_ktrain.backends.kubernetes.plans.validate import CRD_DIR, validate_objects
from jupyter_ktrain.backends.kubernetes.status.derive import job_shape, replica_pods
from jupyter_ktrain.kinds import KIND_TABLE, KINDS, JobKind
from jupyter_ktrain.spec.job import JobSpec

KIND_LIST = list(KIND_TABLE.values())


@pytest.mark.parametrize("kind", KIND_LIST, ids=lambda k: k.name)
def test_each_kind_matches_its_crd(kind: JobKind) -> None:
    crd = yaml.safe_load((CRD_DIR / kind.crd_file).read_text())
    spec = crd["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["plural"]) == (
        kind.group,
        kind.name,
        kind.plural,
    )
    assert kind.version in [v["name"] for v in spec["versions"] if v.get("served")]
    if kind.replica_key:
        (version,) = [v for v in spec["versions"] if v["name"] == kind.version]
        props = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        assert kind.replica_key in props


@pytest.mark.parametrize("kind", KIND_LIST, ids=lambda k: k.name)
def test_each_kind_renders_valid_objects_with_its_pods_in_rank_order(kind: JobKind) -> None:
    assert builder(kind) is BUILDERS[kind.builder]
    spec = JobSpec(name="k", kind=kind.name, nodes=3, backend="kubernetes", image="py:3")
    objects = render(spec, CodeSource()).objects
    validate_objects(objects)
    job = objects[-1]
    assert (job["apiVersion"], job["kind"]) == (kind.api_version, kind.name)
    if kind.replica_key:
        pods = replica_pods(job)
        heads = [r.pod("k", 0) for r in kind.replicas if r.singleton]
        assert pods[0] in heads, pods
        assert job_shape(job).kind == kind.name


def test_the_kind_flag_takes_every_kind_by_its_name() -> None:
    from jupyter_ktrain.frontends.cli_render import build_parser, spec_from_args

    assert set(KINDS) == {"PyTorchJob", "TFJob", "MPIJob", "TrainJob", "XGBoostJob", "RayJob"}
    for name in KINDS:
        args = build_parser().parse_args(["--kind", name, "--name", "k", "--image", "py:3"])
        assert spec_from_args(args).kind == name


def test_xgboostjob_is_a_master_and_workers_running_one_process_each() -> None:
    spec = JobSpec(name="xgb", kind="XGBoostJob", nodes=3, backend="kubernetes", image="py:3")
    job = render(spec, CodeSource()).job
    replicas = job["spec"]["xgbReplicaSpecs"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {"Master": 1, "Worker": 2}
    for replica in replicas.values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "xgboost"
        assert "torch.distributed.run" not in container["command"]
        assert replica["restartPolicy"] == "ExitCode"
    assert replica_pods(job) == ["xgb-master-0", "xgb-worker-0", "xgb-worker-1"]


def test_a_master_missing_or_doubled_is_what_the_xgboost_webhook_rejects() -> None:
    from jupyter_ktrain.backends.kubernetes.plans.validate import check_objects

    spec = JobSpec(name="xgb", kind="XGBoostJob", nodes=2, backend="kubernetes", image="py:3")
    job = render(spec, CodeSource()).job
    job["spec"]["xgbReplicaSpecs"]["Master"]["replicas"] = 2
    assert any("Master replicas must be 1" in p for p in check_objects([job]))
    del job["spec"]["xgbReplicaSpecs"]["Master"]
    assert any("Master is missing" in p for p in check_objects([job]))


@pytest.mark.parametrize("kind", ["TFJob", "MPIJob", "XGBoostJob"])
def test_deepspeed_and_elastic_name_the_kinds_that_take_them(kind: str) -> None:
    from jupyter_ktrain.errors import SpecError

    with pytest.raises(SpecError, match="needs --kind PyTorchJob or TrainJob"):
        JobSpec.create(name="d", kind=kind, deepspeed={"stage": 2})
    with pytest.raises(SpecError, match=r"--elastic needs --kind PyTorchJob \("):
        JobSpec.create(name="e", kind=kind, nodes=2, elastic="2:2")


def test_rayjob_is_a_head_and_workers_that_kuberay_starts_and_the_program_its_entrypoint() -> None:
    spec = JobSpec(name="ray", kind="RayJob", nodes=3, backend="kubernetes", image="py:3")
    job = render(spec, CodeSource.configmap("ray-code")).job
    body = job["spec"]
    assert body["shutdownAfterJobFinishes"] is True
    assert "jupyter_ktrain.pod.runtime /ktrain/program.py" in body["entrypoint"]
    cluster = body["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    for template in (cluster["headGroupSpec"]["template"], group["template"]):
        (container,) = template["spec"]["containers"]
        assert container["name"] == "ray"
        assert not {"command", "args"} & set(container)  # KubeRay's ray start runs
        assert {"name": "KTRAIN_RANK", "value": "0"} in container["env"]  # a task reports
        assert {"name": "ktrain-code", "mountPath": "/ktrain"} in [
            {k: m[k] for k in ("name", "mountPath")} for m in container["volumeMounts"]
        ]  # the driver on the head, a task's imports on a worker
        assert template["metadata"]["labels"]["ktrain.io/job"] == "ray"
    submitter = body["submitterPodTemplate"]  # its log (the driver's) followed as the pods'
    assert submitter["metadata"]["labels"]["ktrain.io/job"] == "ray"
    assert submitter["spec"]["containers"][0]["name"] == "ray"
    one = render(spec.evolve(nodes=1), CodeSource()).job
    assert "workerGroupSpecs" not in one["spec"]["rayClusterSpec"]  # the head alone


def test_rayjob_names_the_ray_its_program_pins_so_kuberay_probes_over_http() -> None:
    """KubeRay probes a Ray 2.53+ pod over HTTP only when ``rayVersion`` says so; otherwise it
    runs ``wget`` in the container, and a slim image (ours on the real node) never gets Ready."""
    spec = JobSpec(name="ray", kind="RayJob", nodes=2, backend="kubernetes", image="py:3")
    files = {"requirements.txt": b"numpy==2.3.0\nray==2.60.0\n"}
    job = render(spec, CodeSource(), files).job
    assert job["spec"]["rayClusterSpec"]["rayVersion"] == "2.60.0"
    validate_objects([job])
    assert "rayVersion" not in render(spec, CodeSource()).job["spec"]["rayClusterSpec"]
    torch = JobSpec(name="t", nodes=2, backend="kubernetes", image="py:3")
    assert "rayVersion" not in json.dumps(render(torch, CodeSource(), files).job)


@pytest.mark.parametrize(
    ("deployment", "ray", "state"),
    [
        ("Initializing", "", "Pending"),
        ("Running", "PENDING", "Running"),
        ("Running", "RUNNING", "Running"),
        ("Running", "SUCCEEDED", "Succeeded"),  # the driver is done; the cluster goes after
        ("Complete", "SUCCEEDED", "Succeeded"),
        ("Complete", "FAILED", "Failed"),
        ("Complete", "STOPPED", "Failed"),
        ("Failed", "", "Failed"),  # e.g. the submitter failed, or activeDeadlineSeconds
        ("Suspended", "", "Pending"),
    ],
)
def test_rayjob_state_from_kuberays_two_fields(deployment: str, ray: str, state: str) -> None:
    from jupyter_ktrain.backends.kubernetes.status.derive import job_state

    status = {"jobDeploymentStatus": deployment, "jobStatus": ray}
    if deployment == "Failed":
        status |= {"reason": "DeadlineExceeded", "message": "past activeDeadlineSeconds"}
    got = job_state({"kind": "RayJob", "metadata": {"name": "r"}, "status": status})
    assert got[0] == state
    if deployment == "Failed":
        assert got[1:] == ("DeadlineExceeded", "past activeDeadlineSeconds")


def test_rayjob_refuses_a_metrics_port_its_pods_would_not_serve() -> None:
    from jupyter_ktrain.errors import SpecError

    with pytest.raises(SpecError, match="a RayJob's pods run none"):
        JobSpec.create(name="r", kind="RayJob", nodes=2, metrics_port=9400)
