"""ktrain.report(): one record line per call in a rank, nothing in the kernel, never raises.

The tests of tests/unit/test_report.py that start processes (a unit test starts none)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from jupyter_ktrain.pod.protocol import format_rank_line, parse_line
from tests.unit.test_report import _OMPI, _TF_CONFIG, report_mod


@pytest.fixture
def rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(report_mod, "_rank_cache", None)
    monkeypatch.setattr(report_mod, "_warned", set())
    yield 3
    report_mod._rank_cache = None


def test_real_rank_process_writes_a_parseable_line() -> None:
    code = "from jupyter_ktrain.pod.report import report; report(step=5, loss=2)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"RANK": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": "."},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rec = parse_line(format_rank_line(1, out.strip())).record
    assert rec is not None
    assert (rec["rank"], rec["step"], rec["loss"]) == (1, 5, 2.0)


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        pytest.param({"RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1"}, 3, id="torchrun"),
        pytest.param({"RANK": "2", "WORLD_SIZE": "3"}, 2, id="xgboostjob"),
        pytest.param({"TF_CONFIG": _TF_CONFIG}, 2, id="tfjob-worker-behind-a-chief"),
        pytest.param({"OMPI_COMM_WORLD_RANK": "3", **_OMPI}, 3, id="mpijob-open-mpi"),
        pytest.param({"PMI_RANK": "1"}, 1, id="mpich"),
    ],
)
def test_report_finds_its_rank_in_every_kinds_environment(env: dict[str, str], rank: int) -> None:
    """The environment each launcher gives a rank, and nothing more: the record names it."""
    code = "from jupyter_ktrain.pod.report import report; report(step=5, loss=2)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PATH": "/usr/bin:/bin", "PYTHONPATH": "."},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rec = parse_line(format_rank_line(rank, out.strip())).record
    assert rec is not None, out
    assert (rec["rank"], rec["step"], rec["loss"]) == (rank, 5, 2.0)
