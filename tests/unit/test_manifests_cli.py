"""``ktrain render``, YAML specs, RDMA profile files, and the validator on hand-edited objects."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from jupyter_ktrain.backends.kubernetes.plans import validate
from jupyter_ktrain.backends.kubernetes.plans.manifests import render
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.frontends.cli_render import render_main
from jupyter_ktrain.spec.job import JobSpec
from jupyter_ktrain.spec.rdma import PROFILES_ENV

SPECS = Path(__file__).resolve().parents[1] / "data" / "specs"


def test_render_prints_yaml_and_writes_generated_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = render_main(
        [
            "--name",
            "bert",
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--image",
            "img:1",
            "--deepspeed",
            "zero2",
            "--bf16",
            "--files-dir",
            str(tmp_path),
            "--cell",
            "abc123",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    (job,) = yaml.safe_load_all(out)
    assert job["kind"] == "PyTorchJob"
    assert job["metadata"]["labels"]["ktrain.io/cell"] == "abc123"
    assert json.loads((tmp_path / "ds_config.json").read_text())["train_batch_size"] == 8
    assert "ds_config.json" in err


def test_render_from_yaml_with_flags_on_top(capsys: pytest.CaptureFixture[str]) -> None:
    spec_file = str(SPECS / "llm-finetune.yaml")
    assert render_main(["-f", spec_file, "--nodes", "6", "--cpu", "48"]) == 0
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 6
    requests = worker["template"]["spec"]["containers"][0]["resources"]["requests"]
    # the flag changed cpu; the file's memory and GPUs stay
    assert requests == {
        "nvidia.com/gpu": "8",
        "rdma/rdma_shared_device_a": "1",
        "cpu": "48",
        "memory": "256Gi",
    }


def test_render_error_is_one_line_on_stderr_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert render_main(["--name", "x", "--image", "i", "--elastic", "4:2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("ktrain render: error: --elastic 4:2")


def test_platform_profiles_file_overrides_a_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "infiniband:\n  env: {NCCL_IB_HCA: 'mlx5_0,mlx5_1', NCCL_DEBUG: WARN}\n"
        "  networks: ib-sriov\n  resource: nvidia.com/hostdev\n  resource_count: 2\n"
    )
    monkeypatch.setenv(PROFILES_ENV, str(profiles))
    assert (
        render_main(["--name", "x", "--image", "i", "--gpus-per-node", "8", "--rdma", "infiniband"])
        == 0
    )
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    template = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    container = template["spec"]["containers"][0]
    assert template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "ib-sriov"
    assert container["resources"]["limits"]["nvidia.com/hostdev"] == "2"
    assert {"name": "NCCL_IB_HCA", "value": "mlx5_0,mlx5_1"} in container["env"]
    assert "securityContext" not in container  # the platform's profile leaves IPC_LOCK off


def test_rdma_profile_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prof = tmp_path / "my-roce.yaml"
    prof.write_text("env: {NCCL_IB_GID_INDEX: '5'}\nhost_network: true\nipc_lock: true\n")
    assert render_main(["--name", "x", "--image", "i", "--rdma", str(prof)]) == 0
    (job,) = yaml.safe_load_all(capsys.readouterr().out)
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"


def base_job() -> dict[str, object]:
    spec = JobSpec.create(
        name="j", nodes=3, image="img", resources={"gpus": 2}, env={"A": "1"}, backend="kubernetes"
    )
    return copy.deepcopy(render(spec).job)


def problems_of(job: dict[str, object]) -> str:
    with pytest.raises(SpecError) as info:
        validate.validate_objects([job])
    return str(info.value)


def test_validator_rejects_what_the_api_server_and_operator_would() -> None:
    job = base_job()
    specs = job["spec"]["pytorchReplicaSpecs"]  # type: ignore[index]
    specs["Master"]["replicas"] = 2
    specs["Worker"]["template"]["spec"]["containers"][0]["env"].append({"name": "A", "value": "2"})
    specs["Worker"]["template"]["spec"]["containers"][0]["name"] = "trainer"
    specs["Worker"]["template"]["spec"]["nodeSelecter"] = {"a": "b"}
    job["spec"]["elasticPolicy"] = {"minReplicas": 4, "maxReplicas": 2}  # type: ignore[index]
    message = problems_of(job)
    assert "Master replicas must be 1" in message
    assert "duplicate entry name='A'" in message
    assert "no container named 'pytorch'" in message
    assert "'nodeSelecter' was unexpected" in message
    assert "minReplicas 4 > maxReplicas 2" in message


def test_validator_checks_pod_fields_against_kubernetes_schema() -> None:
    job = base_job()
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]  # type: ignore[index]
    pod["containers"][0]["ports"] = [{"containerPort": "http"}]
    assert "containerPort" in problems_of(job)


def test_second_validation_compiles_no_schema() -> None:
    job = base_job()
    validate.validate_objects([job])
    before = validate.schema_compilations()
    validate.validate_objects([base_job()])
    assert validate.schema_compilations() == before
