"""What a partial install says: each missing piece one error naming the ``pip install`` that
adds it, raised before anything is made (the install tests cause each one for real, in a fresh
environment; these pin the wording and the order)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain import extras
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.backends.registry import get_backend, render_kubernetes
from jupyter_ktrain.capture import capture
from jupyter_ktrain.errors import MissingPackage, SpecError
from jupyter_ktrain.spec.job import JobSpec

PROGRAM = capture("train(2)\n", {"train": None}, ["", "def train(n):\n    return n\n"], {})


def _without(monkeypatch: pytest.MonkeyPatch, *gone: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in gone else real(name, *args)

    monkeypatch.setattr(extras.importlib.util, "find_spec", find_spec)


def test_a_cluster_without_the_kubernetes_extra_names_the_extra_and_what_lacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _without(monkeypatch, "kubernetes_validate")
    with pytest.raises(MissingPackage) as err:
        get_backend("kubernetes")
    text = str(err.value)
    assert "\n" not in text
    assert isinstance(err.value, SpecError)
    assert "lacks kubernetes_validate" in text
    assert "`pip install 'jupyter-ktrain[kubernetes]'`" in text
    with pytest.raises(MissingPackage, match="--no-validate skips it"):
        render_kubernetes(JobSpec.create(name="r", nodes=2))
    yaml, _files = render_kubernetes(
        JobSpec.create(name="r", nodes=2, image="pytorch/pytorch:2.5"), validate=False
    )
    assert "kind: PyTorchJob" in yaml  # the manifests themselves need no extra


def test_the_local_backend_without_torch_refuses_a_torchrun_job_before_making_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _without(monkeypatch, "torch")
    backend = LocalBackend(tmp_path)
    with pytest.raises(MissingPackage) as err:
        backend.submit(JobSpec.create(name="no-torch", nodes=2), PROGRAM)
    text = str(err.value)
    assert f"the Python the job runs ({sys.executable})" in text
    assert "`pip install torch`" in text
    assert "--backend kubernetes" in text
    assert not (tmp_path / "jobs" / "no-torch").exists()
    # every local node starts torchrun, whatever the kind (a TFJob's too)
    with pytest.raises(MissingPackage):
        backend.dryrun(JobSpec.create(name="tf", kind="TFJob", nodes=1), PROGRAM)


def test_mlflow_and_sweep_say_their_extras_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    _without(monkeypatch, "optuna", "mlflow")
    with pytest.raises(
        MissingPackage, match=r"lacks optuna: `pip install 'jupyter-ktrain\[sweep\]'`"
    ):
        extras.require("sweep")
    with pytest.raises(MissingPackage, match=r"or run with --mlflow off"):
        extras.require("mlflow", "Tracking", otherwise="run with --mlflow off")
