"""Each seed manifest is produced from a short spec and matches it field for field.

Every test lists the few fields where we deliberately differ, with the reason, and asserts
that the difference is exactly that: nothing the seed asks for is lost silently, and nothing
unexpected is added. Common to all seeds:

- ``command``: every replica runs the captured program through the agent and torchrun
  (``launch.node_command``), which reads the operator's PET_* environment; the seeds run
  their own scripts baked into the image.
- labels ``ktrain.io/job``, ``ktrain.io/kind``, ``app.kubernetes.io/managed-by`` on the job and
  its pods: so the notebook finds its jobs and their pods later.
- ``sidecar.istio.io/inject: "false"``: an injected sidecar keeps pods running after training
  ends (the job never completes) and intercepts NCCL's ports.
- GPU and RDMA device counts in ``requests`` as well as ``limits``: Kubernetes defaults
  extended-resource requests to the limits anyway; we write them out.
- ``nprocPerNode`` (PyTorchJob): the operator passes it to torchrun as PET_NPROC_PER_NODE.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from jupyter_ktrain.backends.kubernetes.plans.manifests import render
from jupyter_ktrain.backends.kubernetes.plans.validate import validate_objects
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.flags import spec_from_yaml
from jupyter_ktrain.frontends.cli_render import build_parser, spec_from_args
from jupyter_ktrain.pod.launch import node_command
from jupyter_ktrain.spec.scheduling import DEFAULT_MAX_RESTARTS

from .seedcmp import diff

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT / "tests" / "data" / "seed-manifests"
SPECS = ROOT / "tests" / "data" / "specs"


def seed(name: str) -> dict[str, Any]:
    return yaml.safe_load((SEEDS / name).read_text())


def from_flags(flags: str) -> Any:
    ns = build_parser().parse_args(shlex.split(flags))
    return spec_from_args(ns)


def ours(flags: str) -> dict[str, Any]:
    rendered = render(from_flags(flags))
    validate_objects(rendered.objects)
    return rendered.job


LLM_FLAGS = (
    "--name llm-finetune --namespace ai-training --nodes 4 --gpus-per-node 8 "
    "--image nvcr.io/nvidia/pytorch:24.03-py3 --rdma roce --deepspeed zero3 --bf16 "
    "--micro-batch 2 --grad-accum 8 --dataset nfsordma-datasets:/data:ro "
    "--checkpoints nfsordma-checkpoints:/checkpoints --shm 64Gi "
    "--secret-env HF_TOKEN=hf-token/token --elastic 2:8 --cpu 32 --memory 256Gi "
    "--node-selector nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB "
    "--toleration nvidia.com/gpu:NoSchedule --env OMP_NUM_THREADS=8 "
    "--env TOKENIZERS_PARALLELISM=false --env HF_HOME=/data/hf-cache"
)


def test_llm_finetune_pytorchjob_from_flags_matches_the_seed() -> None:
    job = ours(LLM_FLAGS)
    w = "spec.pytorchReplicaSpecs.Worker"
    c = f"{w}.template.spec.containers[pytorch]"
    differ, extra = diff(job, seed("llm-finetune.pytorchjob.yaml"))
    assert differ == {
        # the seed scales the job on the CPU utilisation of its pods through an HPA: that
        # resizes a training job whenever data loading is busy; we leave autoscaling out
        "spec.elasticPolicy.metrics",
        # the seed's torchrun pins --nnodes=4 (contradicting elastic 2:8) and a script baked
        # into the image; ours is the agent + torchrun reading the operator's PET_* env
        f"{c}.command",
        # a bug fails the job once, a fault restarts (the seed's OnFailure restarts a raising
        # rank forever: a crash loop, then a false success)
        f"{w}.restartPolicy",
    }
    assert extra == {
        "metadata.labels",
        "spec.nprocPerNode",
        "spec.runPolicy",  # backoffLimit: faults are restarted a bounded number of times
        f"{w}.template.metadata.labels",
        f"{w}.template.metadata.annotations.sidecar.istio.io/inject",
        f"{c}.resources.requests.nvidia.com/gpu",
        f"{c}.resources.requests.rdma/rdma_shared_device_a",
        # RDMA pins memory: without IPC_LOCK ibv_reg_mr fails under the default memlock limit
        f"{c}.securityContext",
        # where every rank finds the generated DeepSpeed config
        f"{c}.env[KTRAIN_DEEPSPEED_CONFIG]",
        # the agent reports NCCL's transport and warns when it fell back to sockets
        f"{c}.env[KTRAIN_RDMA]",
        # where ktrain.checkpoint() saves: the --checkpoints mount
        f"{c}.env[KTRAIN_CHECKPOINTS]",
        # torchrun restarts the ranks of surviving pods (the job's limit) and a pod made
        # anew rejoins them: one rendezvous store per round (tests/integration/
        # test_k8s_elastic_resume.py)
        "spec.elasticPolicy.maxRestarts",
        f"{c}.env[TORCH_DISABLE_SHARE_RDZV_TCP_STORE]",
        # a deleted pod's replacement is admitted once the old one's heartbeat expired: 6 s,
        # not torch's 15 s (bench/recovery.py, deleted pod)
        "spec.elasticPolicy.rdzvConf",
        # training code gets no API token unless --service-account names an account
        f"{w}.template.spec.automountServiceAccountToken",
    }
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["command"] == node_command()
    assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_llm_finetune_deepspeed_config_matches_the_seed_but_for_the_batch_size() -> None:
    rendered = render(from_flags(LLM_FLAGS))
    generated = json.loads(rendered.files["ds_config.json"])
    wanted = json.loads((SEEDS / "ds_config.json").read_text())
    differ, extra = diff(generated, wanted)
    # the seed's 64 = 2 x 8 x 4 only holds at world size 4; the job runs 4 x 8 = 32 ranks,
    # so the consistent total is 2 x 8 x 32 = 512 (DeepSpeed aborts on the seed's numbers)
    assert differ == {"train_batch_size"}
    assert extra == set()
    assert generated["train_batch_size"] == 512


def test_llm_finetune_from_yaml_spec_equals_the_flags() -> None:
    from_yaml = render(spec_from_yaml(SPECS / "llm-finetune.yaml", backend="kubernetes"))
    from_cli = render(from_flags(LLM_FLAGS))
    assert from_yaml.objects == from_cli.objects
    assert from_yaml.files == from_cli.files


def test_resnet_pytorchjob_master_and_workers_matches_the_seed() -> None:
    job = ours(
        "--name resnet-distributed-training --namespace default --nodes 4 --gpus-per-node 1 "
        "--cpu 4 --memory 16Gi --cpu-limit 4 --memory-limit 16Gi "
        "--image your-registry/distributed-training:v1 --env NCCL_DEBUG=INFO "
        "--env NCCL_SOCKET_IFNAME=eth0 --volume dataset=imagenet-dataset:/data"
    )
    differ, extra = diff(job, seed("resnet-distributed-training.pytorchjob.yaml"))
    expected_differ: set[str] = set()
    expected_extra = {"metadata.labels", "spec.nprocPerNode", "spec.runPolicy"}
    for rtype in ("Master", "Worker"):
        # ExitCode (the seed: OnFailure): a bug fails once, a fault restarts
        expected_differ.add(f"spec.pytorchReplicaSpecs.{rtype}.restartPolicy")
        rp = f"spec.pytorchReplicaSpecs.{rtype}.template"
        c = f"{rp}.spec.containers[pytorch]"
        # our memory-backed /dev/shm volume is called dshm in every job (the seed: shm);
        # its size is the automatic 8Gi per GPU, the seed's 8Gi
        expected_differ |= {f"{rp}.spec.volumes[shm]", f"{c}.volumeMounts[shm]"}
        expected_extra |= {
            f"{rp}.metadata.labels",
            f"{rp}.spec.volumes[dshm]",
            f"{c}.volumeMounts[dshm]",
            f"{c}.command",
            f"{rp}.spec.automountServiceAccountToken",  # no API token unless one is named
            f"{c}.env[KTRAIN_PEERS]",  # its nodes stop each other when one fails
        }
    assert differ == expected_differ
    assert extra == expected_extra
    shm = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"][-1]
    assert shm == {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}


@pytest.mark.parametrize(
    ("seed_file", "flags"),
    [
        (
            "tf-distributed.tfjob.yaml",
            "--kind TFJob --name tf-distributed --namespace ai-training --nodes 4 "
            "--gpus-per-node 8 --image tensorflow/tensorflow:2.16.1-gpu "
            "--volume data=training-data:/data --shm none",
        ),
        (
            "tensorflow-distributed.tfjob.yaml",
            "--kind TFJob --name tensorflow-distributed --namespace default --nodes 3 "
            "--gpus-per-node 1 --memory 16Gi --memory-limit 16Gi "
            "--image tensorflow/tensorflow:2.13.0-gpu --shm none",
        ),
    ],
)
def test_tfjob_chief_and_workers_match_the_seeds(seed_file: str, flags: str) -> None:
    job = ours(flags)
    differ, extra = diff(job, seed(seed_file))
    expected_differ: set[str] = set()
    expected_extra = {"metadata.labels", "spec.runPolicy"}
    for rtype in ("Chief", "Worker"):
        # ExitCode (the seed: OnFailure): a bug fails once, a fault restarts
        expected_differ.add(f"spec.tfReplicaSpecs.{rtype}.restartPolicy")
        rp = f"spec.tfReplicaSpecs.{rtype}.template"
        c = f"{rp}.spec.containers[tensorflow]"
        # one process per replica under the agent; TensorFlow reads the operator's TF_CONFIG
        expected_differ.add(f"{c}.command")
        expected_extra.add(f"{c}.env")  # KTRAIN_PEERS: the nodes stop each other (no pod lost)
        expected_extra.add(f"{rp}.metadata")
        expected_extra.add(f"{rp}.spec.automountServiceAccountToken")  # no API token
        if (
            "requests"
            not in seed(seed_file)["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"][
                "containers"
            ][0]["resources"]
        ):
            expected_extra.add(f"{c}.resources.requests")
    assert differ == expected_differ
    assert extra == expected_extra


def test_horovod_mpijob_matches_the_seed() -> None:
    job = ours(
        "--kind MPIJob --name horovod-training --namespace ai-training --nodes 4 "
        "--gpus-per-node 8 --image horovod/horovod:latest-gpu --clean-pod-policy Running "
        "--ttl 3600"
    )
    differ, extra = diff(job, seed("horovod-training.mpijob.yaml"))
    la, wo = "spec.mpiReplicaSpecs.Launcher.template", "spec.mpiReplicaSpecs.Worker.template"
    # containers are named "mpi", the operator's default main container (the seed:
    # mpi-launcher / mpi-worker), so the comparison sees them as renamed
    assert differ == {f"{la}.spec.containers[mpi-launcher]", f"{wo}.spec.containers[mpi-worker]"}
    assert extra == {
        "metadata.labels",
        "spec.mainContainer",
        "spec.runPolicy.backoffLimit",  # faults are restarted a bounded number of times
        # we always state the restart policy (default Never, the operator's implicit MPIJob
        # default: a failed launcher fails the job; its agent re-runs mpirun on a fault)
        "spec.mpiReplicaSpecs.Launcher.restartPolicy",
        "spec.mpiReplicaSpecs.Worker.restartPolicy",
        f"{la}.metadata",
        f"{wo}.metadata",
        f"{la}.spec.containers[mpi]",
        f"{wo}.spec.containers[mpi]",
        # the workers get no API token; the launcher keeps its account's (kubectl exec)
        f"{wo}.spec.automountServiceAccountToken",
    }
    spec = job["spec"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    seed_spec = seed("horovod-training.mpijob.yaml")["spec"]["mpiReplicaSpecs"]
    seed_launcher = seed_spec["Launcher"]["template"]["spec"]["containers"][0]
    seed_worker = seed_spec["Worker"]["template"]["spec"]
    # the renamed containers carry what the seed asks for: image, launcher resources,
    # 64Gi /dev/shm and 8 GPUs per worker, 32 ranks
    assert launcher["image"] == seed_launcher["image"]
    assert launcher["resources"] == seed_launcher["resources"]
    assert launcher["command"][launcher["command"].index("-np") + 1] == "32"
    assert worker["volumes"] == seed_worker["volumes"]
    assert worker["containers"][0]["volumeMounts"] == seed_worker["containers"][0]["volumeMounts"]
    assert worker["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "8"}
    assert spec["slotsPerWorker"] == 8
    assert spec["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 3600,
        "backoffLimit": DEFAULT_MAX_RESTARTS,
    }


def test_an_elastic_job_rejoins_a_replaced_pod_soon_and_keeps_the_users_rendezvous_settings() -> (
    None
):
    """A node stopped by a signal never leaves torchrun's rendezvous: its replacement waits for
    the old one's heartbeat to expire, so elastic jobs shorten that; the operator sets
    ``PET_RDZV_CONF`` from ``rdzvConf`` after the container's environment, so a user's own
    ``--env PET_RDZV_CONF=...`` is merged into ``rdzvConf`` instead of being overridden."""
    job = ours("--name el --image img:1 --nodes 2 --elastic 2:4")
    conf = {c["key"]: c["value"] for c in job["spec"]["elasticPolicy"]["rdzvConf"]}
    assert conf == {"keep_alive_interval": "2", "keep_alive_max_attempt": "3"}

    job = ours("--name el --image img:1 --nodes 2 --elastic 2:4 "
               "--env PET_RDZV_CONF=last_call_timeout=5,keep_alive_interval=1")  # fmt: skip
    conf = {c["key"]: c["value"] for c in job["spec"]["elasticPolicy"]["rdzvConf"]}
    assert conf == {"keep_alive_interval": "1", "keep_alive_max_attempt": "3",
                    "last_call_timeout": "5"}  # fmt: skip
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "PET_RDZV_CONF" not in {e["name"] for e in pod["containers"][0]["env"]}

    bad = from_flags("--name el --image img:1 --nodes 2 --elastic 2:4 --env PET_RDZV_CONF=x")
    with pytest.raises(SpecError, match="'x' is not KEY=VALUE"):
        render(bad)
