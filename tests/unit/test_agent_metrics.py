"""The agent's Prometheus endpoint, read back with Prometheus' own Python parser
(``prometheus_client.parser``): GPU samples (an H100's values from the issue-11 run, through
the fake NVML seam) and ``ktrain.report`` metrics, labelled job, replica, node, GPU/rank."""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_ktrain.pod.agent.metrics import MetricsEndpoint, MetricsStore, ReportListener

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


def test_the_report_listener_takes_a_ranks_batch_of_records_in_one_datagram() -> None:
    """A rank sends the records it wrote together in one datagram, one record a line."""
    store = MetricsStore({"job": "j"})
    listener = ReportListener(store).start()
    try:
        host, port = listener.address.rsplit(":", 1)
        batch = (
            b'{"type":"metric","rank":0,"t":1.0,"step":7,"loss":0.5}\n'
            b'{"type":"metric","rank":1,"t":1.0,"step":7,"loss":0.25}\n'
        )
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(batch, (host, int(port)))
        deadline = time.monotonic() + 30
        while len(_families(store.render()).get("ktrain_metric", [])) < 2:
            assert time.monotonic() < deadline, store.render()
            time.sleep(0.01)
    finally:
        listener.stop()
    values = {s.labels["rank"]: s.value for s in _families(store.render())["ktrain_metric"]}
    assert values == {"0": 0.5, "1": 0.25}
