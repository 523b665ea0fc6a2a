"""Requirement routes: pins checked, provided ones skipped, wheels downloaded for offline."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.errors import PackagingError
from jupyter_ktrain.packaging.push_progress import TextProgress, human_bytes
from jupyter_ktrain.packaging.requirements import plan_requirements
from jupyter_ktrain.pod.install import ensure_requirements, missing_pins


def test_unpinned_requirements_are_refused() -> None:
    with pytest.raises(PackagingError, match="not pinned as NAME==VERSION"):
        plan_requirements(["numpy>=2"])


def test_pod_start_route_ships_requirements_txt_without_provided_ones() -> None:
    plan = plan_requirements(["numpy==2.1.0", "# comment", "", "Torch==2.5.1"], provided=["torch"])
    assert plan.route == "pod-start"
    assert plan.files == {"requirements.txt": b"numpy==2.1.0\n"}
    assert plan.provided == ("Torch==2.5.1",)
    assert "installed from the package index when the pod starts" in plan.describe()
    assert plan_requirements(["torch==2.5.1"], provided=["torch"]).route == "none"
    assert plan_requirements([]).describe() == "No requirements to install."


def test_pod_install_skips_what_the_image_has_and_goes_offline_with_wheels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest_version = __import__("pytest").__version__
    assert missing_pins([f"pytest=={pytest_version}", "pytest==0.0.1", "nosuchpkg==1.0"]) == [
        "pytest==0.0.1",
        "nosuchpkg==1.0",
    ]
    # a local version label satisfies the pin (the kernel's torch 2.13.0+cu130 -> torch==2.13.0)
    assert missing_pins(["torch==2.13.0"], have=lambda _n: "2.13.0+cu130") == []
    assert missing_pins(["torch==2.13.0"], have=lambda _n: "2.12.0+cu130") == ["torch==2.13.0"]
    (tmp_path / "requirements.txt").write_text(f"pytest=={pytest_version}\n")
    assert ensure_requirements(str(tmp_path), run=lambda argv: 99) == 0
    assert capsys.readouterr().out == ""  # nothing needed: nothing said, pip not run
    (tmp_path / "requirements.txt").write_text("nosuchpkg==1.0\n")
    (tmp_path / "wheels").mkdir()
    seen: list[list[str]] = []
    assert ensure_requirements(str(tmp_path), run=lambda argv: seen.append(argv) or 0) == 0
    argv = seen[0]
    assert argv[:4] == [sys.executable, "-m", "pip", "install"]
    assert argv[argv.index("--find-links") + 1] == str(tmp_path / "wheels")
    assert "--no-index" in argv
    assert argv[-1] == "nosuchpkg==1.0"
    assert "--quiet" in argv
    out = capsys.readouterr().out
    assert (
        out == "[agent]: installed 1 requirement(s) from shipped wheels (offline): nosuchpkg==1.0\n"
    )


def test_text_progress_draws_a_bar_and_throttles() -> None:
    out = io.StringIO()
    t = [0.0]
    bar = TextProgress(out, width=10, clock=lambda: t[0])
    bar(0, 2048, "code layer")
    bar(1024, 2048, "code layer")  # same instant: skipped
    t[0] = 1.0
    bar(1024, 2048, "code layer")
    bar(2048, 2048, "code layer")  # final: always drawn
    lines = out.getvalue().split("\r")[1:]
    assert len(lines) == 3
    assert lines[1] == "[#####.....]  50% 1.0 KB/2.0 KB code layer"
    assert lines[2].endswith("100% 2.0 KB/2.0 KB code layer\n")
    assert human_bytes(5 * 1024**3) == "5.0 GB"
