"""In a pod with a service account token (a Kubeflow notebook) the cluster is the default
backend, its namespace the pod's; ``--namespace`` on a job command is the cluster's only."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.backends.kubernetes.client import kube_api
from jupyter_ktrain.backends.registry import default_backend_name
from jupyter_ktrain.config import set_config
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.frontends.magics import run_line_command
from jupyter_ktrain.server import served_backends


@pytest.fixture
def pod_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "serviceaccount"
    folder.mkdir()
    (folder / "token").write_text("t")
    (folder / "namespace").write_text("kubeflow-user\n")
    monkeypatch.setattr(kube_api, "SA_DIR", folder)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.delenv("KTRAIN_PANEL_BACKENDS", raising=False)
    return folder


def test_outside_a_pod_the_default_is_local(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert default_backend_name() == "local"


def test_in_a_pod_the_cluster_is_the_default_and_the_panel_lists_it(pod_account: Path) -> None:
    assert default_backend_name() == "kubernetes"
    assert served_backends() == ["local", "kubernetes"]
    set_config(["backend=local"])  # the user's choice wins
    assert default_backend_name() == "local"


def test_a_pod_without_a_token_is_not_in_the_cluster(pod_account: Path) -> None:
    (pod_account / "token").unlink()  # automountServiceAccountToken: false
    assert default_backend_name() == "local"


def test_namespace_is_for_the_cluster_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SpecError, match="--namespace is for the kubernetes backend"):
        run_line_command(["cancel", "job-b", "--namespace", "team-b"])
    with pytest.raises(SpecError, match="--namespace needs a value"):
        run_line_command(["cancel", "job-b", "--namespace"])
