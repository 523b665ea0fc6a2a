"""``scripts/gpu-check``: what can be checked without a GPU. Its sampling verdict on the
agent's recorded H100 output (tests/data/logs), and its honest answer on a machine without
one (exit 2, one JSON line saying so). The GPU run itself needs a GPU machine."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.errors import JobFailed
from jupyter_ktrain.pod.agent.metrics import MetricsStore
from jupyter_ktrain.pod.protocol import parse_line

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "data" / "logs" / "h100_1x1_node0.log"
UUID = "GPU-3f1c2a9e-0000-0000-0000-000000000000"
H100 = {"uuid": UUID, "power_limit_w": 700.0, "mem_total_mib": 81559.0}


def _gpu_check() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scrape(lines: list[str]) -> str:
    store = MetricsStore({"job": "gpu-check", "replica": "r", "node": "0"})
    records = [parse_line(x).record for x in lines]
    store.gpu([r for r in records if r and r.get("type") == "gpu"])
    return store.render()


def test_sampling_verdict_on_the_recorded_h100_run() -> None:
    lines = LOG.read_text().splitlines()
    verdict = _gpu_check().judge_sampling(lines, H100, _scrape(lines))
    assert verdict["failed"] == []
    assert verdict["ok"] is True
    assert verdict["records"] == 8
    assert verdict["interval_s_median"] == 1.0
    assert verdict["temp_c"] == [37.0, 68.0]
    assert verdict["power_w_max"] == 697.3


def test_sampling_verdict_names_what_is_wrong() -> None:
    lines = LOG.read_text().splitlines()
    other = {**H100, "uuid": "GPU-00000000-another-gpu", "power_limit_w": 300.0}
    verdict = _gpu_check().judge_sampling(lines, other, _scrape(lines))
    assert verdict["ok"] is False
    assert verdict["failed"] == ["right_uuid", "power_in_range", "prometheus"]
    # the same samples every half second are not 1 Hz
    records = [parse_line(x).record for x in lines]
    gpu = [r for r in records if r and r.get("type") == "gpu"]
    halved = [
        "[agent]: @@ktrain " + json.dumps({**r, "t": gpu[0]["t"] + i * 0.5})
        for i, r in enumerate(gpu)
    ]
    assert _gpu_check().judge_sampling(halved, H100, _scrape(halved))["failed"] == ["one_hz"]


class _FailingShell:
    """A kernel whose ``%%ktrain`` cell raises JobFailed, as it does for a job that failed."""

    def __init__(self) -> None:
        self.cells: list[str] = []

    def run_cell_magic(self, magic: str, line: str, cell: str) -> Any:
        self.cells.append(cell)
        raise JobFailed("Job 'gc-oom' failed: rank 0 ran out of GPU memory", headline="OOM")


def _failing_kernel(module: Any) -> Any:
    kernel = module.Kernel.__new__(module.Kernel)  # no IPython: only its shell's answer matters
    kernel.shell = _FailingShell()
    kernel.attach = lambda name: f"job {name} as it ended"
    return kernel


def test_an_intended_failure_is_the_job_not_an_error() -> None:
    """The failures check: an OOM job's JobFailed is what it should do; the check goes on
    with the job (its status and logs say which class), and to the next failure."""
    module = _gpu_check()
    kernel = _failing_kernel(module)
    job = kernel.run("gc-oom", module.ONE_GPU, "oom()\n", 120, failing=True)
    assert job == "job gc-oom as it ended"
    assert kernel.shell.cells == ["oom()\n"]


def test_a_job_meant_to_succeed_still_fails_its_check() -> None:
    module = _gpu_check()
    kernel = _failing_kernel(module)
    with pytest.raises(JobFailed, match="gc-oom"):
        kernel.run("gc-nccl", module.ONE_GPU, "total = nccl_sum()\n", 120)
