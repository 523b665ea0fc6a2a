"""Shared fixtures: every test gets its own job registry, so nothing leaks between tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.cluster.pytest_plugin", "tests.procwatch"]

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(autouse=True)
def ktrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "ktrain-home"
    monkeypatch.setenv("KTRAIN_HOME", str(home))
    # node processes import the package from this checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return home
