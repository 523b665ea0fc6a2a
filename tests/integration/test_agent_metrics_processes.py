"""The agent's Prometheus endpoint, read back with Prometheus' own Python parser
(``prometheus_client.parser``): GPU samples (an H100's values from the issue-11 run, through
the fake NVML seam) and ``ktrain.report`` metrics, labelled job, replica, node, GPU/rank.

The tests of tests/unit/test_agent_metrics.py that start processes (a unit test starts none)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.pod.agent import runner
from tests.unit.test_agent_metrics import _families
from tests.unit.test_sampler import FakeNvml

SCRAPER = r"""
import os, sys, time, urllib.request
import jupyter_ktrain as ktrain
url = "http://127.0.0.1:%s/metrics" % os.environ["KTRAIN_METRICS_PORT"]
deadline = time.time() + 20
while time.time() < deadline:
    ktrain.report(step=7, loss=0.25, lr=3e-4)
    body = urllib.request.urlopen(url).read().decode()
    if "ktrain_metric{" in body and "ktrain_gpu_power_watts{" in body:
        open(sys.argv[1], "w").write(body)
        break
    time.sleep(0.05)
"""


def test_agent_serves_its_gpu_samples_and_its_ranks_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real runner with the fake NVML seam; its child reports like a rank and scrapes."""

    port = _free_port()
    out = tmp_path / "scrape.txt"
    env = {"KTRAIN_METRICS_PORT": str(port), "KTRAIN_METRICS_HOST": "127.0.0.1",
           "KTRAIN_JOB_NAME": "j1", "KTRAIN_REPLICA": "j1-node-0", "PET_NODE_RANK": "0",
           "RANK": "0", "CUDA_VISIBLE_DEVICES": "1"}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", root)
    cmd = ["--interval", "0.05", "--", sys.executable, "-c", SCRAPER, str(out)]
    assert runner.main(cmd, nvml=FakeNvml()) == 0
    said = capsys.readouterr().out
    assert f"[agent]: metrics for Prometheus at http://127.0.0.1:{port}/metrics" in said
    fams = _families(out.read_text())
    [power] = fams["ktrain_gpu_power_watts"]
    assert power.labels == {"job": "j1", "replica": "j1-node-0", "node": "0", "gpu": "0",
                            "uuid": "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff"}  # fmt: skip
    assert power.value == 301.2
    reported = {s.labels["name"]: s.value for s in fams["ktrain_metric"]}
    assert reported == {"loss": 0.25, "lr": 3e-4}
    assert fams["ktrain_step"][0].value == 7.0


def test_a_taken_port_is_one_warning_and_the_job_still_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["--gpu-sampling", "off", "--metrics-port", str(port), "--metrics-host",
                "127.0.0.1", "--", sys.executable, "-c", "print('trained')"]  # fmt: skip
        assert runner.main(argv) == 0
    said = capsys.readouterr().out
    assert f"[agent]: warning: metrics endpoint off: cannot listen on 127.0.0.1:{port}" in said
    assert "node command exited with code 0" in said


def test_metrics_are_off_unless_asked() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_ktrain.pod.agent", "--gpu-sampling", "off", "--",
         sys.executable, "-c", "import os; print(os.environ.get('KTRAIN_METRICS_UDP'))"],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": "."}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    assert "None" in done.stdout.splitlines()
    assert "metrics for Prometheus" not in done.stdout


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
