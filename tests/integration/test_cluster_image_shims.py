"""The images the process kubelet cannot pull but must run: the MPI launcher's
``kubectl-delivery`` init container puts a working kubectl at ``/opt/kube/kubectl`` (in the
pod's emptyDir), where the launcher's ``kubexec.sh`` runs it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cluster.image_shims import repository, shim_image


@pytest.mark.parametrize(
    ("ref", "repo"),
    [
        ("ghcr.io/kubeflow/training-v1/kubectl-delivery:latest",
         "ghcr.io/kubeflow/training-v1/kubectl-delivery"),
        ("kubeflow/kubectl-delivery", "docker.io/kubeflow/kubectl-delivery"),
        ("kubeflow/kubectl-delivery@sha256:" + "0" * 64, "docker.io/kubeflow/kubectl-delivery"),
        ("alpine:3.17", "docker.io/library/alpine"),
        ("localhost:5000/ktrain/job:abc", "localhost:5000/ktrain/job"),
    ],
)  # fmt: skip
def test_image_references_name_their_repository(ref: str, repo: str) -> None:
    assert repository(ref) == repo


def test_only_known_images_get_a_shim() -> None:
    kubectl = Path("/cache/bin/kubectl")
    image = shim_image("ghcr.io/kubeflow/training-v1/kubectl-delivery:latest", kubectl)
    assert image is not None
    assert [*image.entrypoint, *image.cmd] == ["/bin/sh", "-c", f"cp {kubectl} /opt/kube/kubectl"]
    assert shim_image("kubeflow/kubectl-delivery:v1.9.3", kubectl) == image
    assert shim_image("nvcr.io/nvidia/pytorch:24.03-py3", kubectl) is None


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("kubectl") is None,
    reason="needs root, unshare and a kubectl",
)
def test_kubectl_delivery_leaves_a_runnable_kubectl_in_the_pods_volume(tmp_path: Path) -> None:
    """As the kubelet runs it: a private mount namespace with the emptyDir at /opt/kube."""
    kubectl = Path(shutil.which("kubectl") or "")
    image = shim_image("ghcr.io/kubeflow/training-v1/kubectl-delivery:latest", kubectl)
    assert image is not None
    volume = tmp_path / "mpi-job-kubectl"
    volume.mkdir()
    # a tmpfs over /opt keeps the host untouched; then the pod's volume at /opt/kube
    script = " && ".join([
        "mount -t tmpfs tmpfs /opt", "mkdir -p /opt/kube", f"mount --bind {volume} /opt/kube",
        shlex.join([*image.entrypoint, *image.cmd]),
        "/opt/kube/kubectl version --client",
    ])  # fmt: skip
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "--", "sh", "-c", script],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Client Version:" in done.stdout
    assert (volume / "kubectl").read_bytes() == kubectl.read_bytes()
    assert os.access(volume / "kubectl", os.X_OK)
