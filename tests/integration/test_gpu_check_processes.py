"""``scripts/gpu-check``: what can be checked without a GPU. Its sampling verdict on the
agent's recorded H100 output (tests/data/logs), and its honest answer on a machine without
one (exit 2, one JSON line saying so). The GPU run itself needs a GPU machine.

The tests of tests/unit/test_gpu_check.py that start processes (a unit test starts none)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.unit.test_gpu_check import ROOT


def test_without_a_gpu_it_says_so_and_exits_2() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML: the real check runs here instead")
    except Exception:
        pass
    done = subprocess.run([str(ROOT / "scripts" / "gpu-check")], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] is False
    assert result["error"].startswith("no NVIDIA GPU to check here")
