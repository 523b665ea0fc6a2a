"""The GPU sampler against a fake NVML seam: UUID selection, records, failure isolation;
and the runner that hosts it (real child processes, exit codes, NCCL debug env).

The tests of tests/unit/test_sampler.py that start processes (a unit test starts none)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jupyter_ktrain.pod.agent import runner
from tests.unit.test_sampler import FakeNvml


def test_runner_survives_a_sampler_that_raises_on_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Boom(FakeNvml):
        def device_count(self) -> int:
            raise MemoryError("boom")

    assert (
        runner.main(["--gpu-sampling", "on", "--", sys.executable, "-c", "pass"], nvml=Boom()) == 0
    )
    out = capsys.readouterr().out
    assert "[agent]: warning: GPU sampling off: cannot list GPUs (MemoryError: boom)" in out


# -- runner -----------------------------------------------------------------------------


def _run_agent(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jupyter_ktrain.pod.agent", *args],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ".", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_agent_process_passes_exit_code_env_and_says_sampling_is_off() -> None:
    code = "import os,sys; print(os.environ.get('NCCL_DEBUG')); sys.exit(7)"
    done = _run_agent(["--", sys.executable, "-c", code], {"KTRAIN_RDMA": "ib"})
    lines = done.stdout.splitlines()
    assert done.returncode == 7
    assert "INFO" in lines
    assert lines[-1] == "[agent]: node command exited with code 7"
    # this machine has no NVML library (or no GPU): one line, and the job still ran
    off = [x for x in lines if "GPU sampling" in x]
    assert len(off) == 1


@pytest.mark.slow
def test_agent_forwards_sigterm_and_reports_128_plus_signal() -> None:
    code = "import time; print('ready', flush=True); time.sleep(30)"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_ktrain.pod.agent",
            "--gpu-sampling",
            "off",
            "--",
            sys.executable,
            "-c",
            code,
        ],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.terminate()
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert "node command exited with code 143" in out


# -- NVML over nvidia-ml-py: memory v2 -------------------------------------------------------
