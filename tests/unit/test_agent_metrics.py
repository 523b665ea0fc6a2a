"""The agent's Prometheus endpoint, read back with Prometheus' own Python parser
(``prometheus_client.parser``): GPU samples (an H100's values from the issue-11 run, through
the fake NVML seam) and ``ktrain.report`` metrics, labelled job, replica, node, GPU/rank."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_ktrain.pod.agent import runner
from jupyter_ktrain.pod.agent.metrics import MetricsEndpoint, MetricsStore

H100 = "GPU-3f1c2a9e-0000-0000-0000-000000000000"


def _families(text: str) -> dict[str, list[Any]]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_store_renders_what_prometheus_parses_with_every_label() -> None:
    store = MetricsStore({"job": "llama-ft", "replica": "llama-ft-worker-0", "node": "1"})
    store.gpu([{"type": "gpu", "node": 1, "gpu": 0, "uuid": H100, "t": 1795407399.1,
                "util": 100.0, "power": 697.3, "temp": 68.0, "mem_used": 40960.0,
                "mem_total": 81559.0}])  # fmt: skip
    store.report({"type": "metric", "rank": 3, "t": 1.0, "step": 200, "total": 900, "loss": 1.25})
    store.report({"type": "metric", "rank": 3, "t": 2.0, "step": 300, "loss": 0.625,
                  'odd "name"\\x': 2.0})  # fmt: skip
    store.report({"type": "metric", "rank": "x", "loss": 9.0})  # not a rank: ignored
    fams = _families(store.render())
    [util] = fams["ktrain_gpu_utilization_percent"]
    assert util.labels == {"job": "llama-ft", "replica": "llama-ft-worker-0", "node": "1",
                           "gpu": "0", "uuid": H100}  # fmt: skip
    assert util.value == 100.0
    assert fams["ktrain_gpu_memory_used_bytes"][0].value == 40960 * 2**20
    assert fams["ktrain_gpu_memory_total_bytes"][0].value == 81559 * 2**20
    assert fams["ktrain_gpu_power_watts"][0].value == 697.3
    assert fams["ktrain_gpu_temperature_celsius"][0].value == 68.0
    metrics = {s.labels["name"]: s for s in fams["ktrain_metric"]}
    assert metrics["loss"].value == 0.625  # the latest report wins
    assert metrics["loss"].labels["rank"] == "3"
    assert metrics['odd "name"\\x'].value == 2.0  # escaped on the wire, intact when parsed
    assert set(metrics) == {"loss", 'odd "name"\\x'}  # a progress record's total is no metric
    [step] = fams["ktrain_step"]
    assert (step.labels["rank"], step.value) == ("3", 300.0)


def test_endpoint_serves_metrics_and_only_metrics() -> None:
    store = MetricsStore({"job": "j", "replica": "r", "node": "0"})
    store.report({"type": "metric", "rank": 0, "step": 1, "loss": 0.5})
    endpoint = MetricsEndpoint(store, "127.0.0.1", 0).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics") as r:
            assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            assert _families(r.read().decode())["ktrain_metric"][0].value == 0.5
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/")
        assert err.value.code == 404
        err.value.close()
    finally:
        endpoint.stop()


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
    from .test_sampler import FakeNvml

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
