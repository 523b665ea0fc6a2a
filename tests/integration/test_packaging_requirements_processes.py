"""Requirement routes: pins checked, provided ones skipped, wheels downloaded for offline.

The tests of tests/unit/test_packaging_requirements.py that start processes (a unit test
starts none)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jupyter_ktrain.errors import PackagingError
from jupyter_ktrain.packaging.layer import LayerCache
from jupyter_ktrain.packaging.requirements import plan_requirements
from tests.integration.registry_tools import make_wheel


@pytest.mark.slow
def test_offline_route_downloads_wheels_once_into_the_layer(tmp_path: Path) -> None:
    index = tmp_path / "index"
    make_wheel(index, "tinypkg", "1.0", "VALUE = 42\n")
    cache = LayerCache(tmp_path / "cache" / "blobs")
    args = ["--no-index", "--find-links", str(index)]
    plan = plan_requirements(["tinypkg==1.0"], offline=True, pip_args=args, cache=cache)
    assert plan.route == "wheels"
    assert sorted(plan.files) == ["requirements.txt", "wheels/tinypkg-1.0-py3-none-any.whl"]
    assert "installed offline" in plan.describe()

    def no_pip(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        raise AssertionError("pip ran again although the wheels are cached")

    again = plan_requirements(
        ["tinypkg==1.0"], offline=True, pip_args=args, cache=cache, runner=no_pip
    )
    assert again.files == plan.files
    with pytest.raises(PackagingError, match="drop offline mode"):
        plan_requirements(["nosuchpkg==1.0"], offline=True, pip_args=args, cache=cache)
