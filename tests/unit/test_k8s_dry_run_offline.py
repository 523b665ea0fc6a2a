"""`%%ktrain --backend kubernetes --dry-run` renders the objects without any cluster, so a
user can review them (or commit them) before a kubeconfig exists."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell

FLAGS = (
    "--backend kubernetes --nodes 4 --gpus-per-node 8 --image nvcr.io/nvidia/pytorch:24.03-py3 "
    "--rdma roce --deepspeed zero3 --bf16 --micro-batch 2 --grad-accum 8 "
    "--dataset nfsordma-datasets:/data:ro --shm 64Gi --secret-env HF_TOKEN=hf-token/token "
    "--elastic 2:8 --dry-run"
)


@pytest.mark.parametrize("namespace", ["", " --namespace ai-training"])
def test_dry_run_needs_no_cluster(
    namespace: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With its namespace given, nothing asks the cluster for one: the render still needs
    none (the topology check connected, and a dry run without a kubeconfig failed)."""
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    assert sh.run_cell("def train(model, epochs):\n    return epochs", store_history=True).success
    cell = 'train(model="meta-llama/Llama-2-13b-hf", epochs=3)'
    job = sh.run_cell_magic("ktrain", FLAGS + namespace, cell)
    out = capsys.readouterr().out
    assert job.dry_run
    kinds = [o["kind"] for o in job.plan.request.objects]
    assert kinds == ["ConfigMap", "PyTorchJob"]
    if not namespace:
        assert "namespace shown as 'default'" in out
    for text in (
        "kind: PyTorchJob",
        "NCCL_IB_GID_INDEX",
        "k8s.v1.cni.cncf.io/networks",
        "medium: Memory",
        "secretKeyRef",
        "rdzvBackend: c10d",
    ):
        assert text in out, text
    assert "hf-token" in out  # the Secret's name, never a value
    sh.reset(new_session=True)


def test_attach_reads_the_shape_the_job_was_created_with() -> None:
    """What `%ktrain attach` shows for a cluster job: read back from its object, not 1 x 1."""
    from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, render
    from jupyter_ktrain.backends.kubernetes.status.derive import job_shape
    from jupyter_ktrain.jobs import JobShape
    from jupyter_ktrain.spec.job import JobSpec

    spec = JobSpec.create(name="shape", backend="kubernetes", nodes=3, resources={"gpus": 4},
                          image="nvcr.io/nvidia/pytorch:24.03-py3")  # fmt: skip
    [job] = [o for o in render(spec, CodeSource()).objects if o["kind"] == "PyTorchJob"]
    assert job_shape(job) == JobShape("PyTorchJob", nodes=3, procs_per_node=4, gpus_per_node=4)
