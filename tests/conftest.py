"""Shared fixtures: every test gets its own job registry, so nothing leaks between tests.

Every test is also marked with its area, so one area runs alone (``pytest -m cluster``) and
``scripts/test_times.py`` adds up the junit XML's durations by area:

- ``unit``: ``tests/unit`` (starts no process);
- ``cluster``: a test that uses the test cluster (``test_cluster``, ``kubeflow_profiles``);
- ``browser``: ``tests/browser`` (JupyterLab in Chromium);
- ``notebooks``: ``tests/integration/test_notebooks.py`` (the example notebooks, executed);
- ``local``: every other integration test (torchrun jobs, kernels, registry, MLflow).

"""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.cluster.pytest_plugin", "tests.procwatch"]

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

AREAS = {
    "unit": "tests/unit: starts no process",
    "local": "integration tests on this machine: torchrun jobs, kernels, registry, MLflow",
    "cluster": "tests that use the test cluster (a real control plane and operators)",
    "browser": "tests/browser: JupyterLab in Chromium",
    "notebooks": "the example notebooks, executed (tests/integration/test_notebooks.py)",
}
CLUSTER_FIXTURES = ("ktrain_cluster_session",)  # test_cluster and kubeflow_profiles use it
# modules that `scripts/check` runs in its second stream, beside the cluster's tests and the
# notebooks, so that the two streams take about as long (their area stays theirs)
SECOND_STREAM = ("test_install.py",)


def area_of(item: pytest.Item) -> str:
    """The area ``item`` belongs to: by its folder, then by the fixtures it uses."""
    parts = Path(str(item.path)).relative_to(ROOT).parts
    if parts[:2] == ("tests", "unit"):
        return "unit"
    if parts[:2] == ("tests", "browser"):
        return "browser"
    if any(name in CLUSTER_FIXTURES for name in getattr(item, "fixturenames", ())):
        return "cluster"
    if parts[-1] == "test_notebooks.py":
        return "notebooks"
    return "local"


def pytest_configure(config: pytest.Config) -> None:
    for name, what in AREAS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    config.addinivalue_line("markers", "second_stream: run by scripts/check beside the cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        area = area_of(item)
        item.add_marker(area)
        if Path(str(item.path)).name in SECOND_STREAM:
            item.add_marker("second_stream")
        item.user_properties.append(("area", area))  # in the junit XML, for test_times.py


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (torch, transformers, kubernetes, ...) lives to the end: moved
    out of the garbage collector's sight, so that each ``gc.collect()`` (IPython runs one on
    every shell reset, two per magic test) takes ~0.05 s, not ~1 s. Objects made from here on
    are collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def ktrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "ktrain-home"
    monkeypatch.setenv("KTRAIN_HOME", str(home))
    # node processes import the package from this checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return home
