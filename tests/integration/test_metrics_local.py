"""A real local job started with ``%%ktrain --metrics-port``: every node's agent serves its
ranks' ``ktrain.report`` metrics for Prometheus, read back with Prometheus' own parser."""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow

TRAIN = """
import os, time
import jupyter_ktrain as ktrain

def train(steps, pause):
    rank = int(os.environ["RANK"])
    for step in range(1, steps + 1):
        ktrain.report(step=step, loss=1.0 / step + rank, tokens_per_s=1000.0 * (rank + 1))
        time.sleep(pause)
"""


def _two_free_ports() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise AssertionError("no two adjacent free ports")


def _scrape(port: int) -> dict[str, list[Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_each_local_node_serves_its_ranks_metrics_for_prometheus() -> None:
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    shell.extension_manager.load_extension("jupyter_ktrain")
    assert shell.run_cell(TRAIN, store_history=True).success
    port = _two_free_ports()
    flags = f"--nodes 2 --procs-per-node 1 --name prom-local --metrics-port {port} --detach"
    job = shell.run_cell_magic("ktrain", flags, "train(600, 0.1)\n")
    try:
        found: dict[int, dict[str, list[Any]]] = {}
        deadline = time.monotonic() + 90
        while len(found) < 2 and time.monotonic() < deadline:
            for node in (0, 1):
                fams = _scrape(port + node)
                if "ktrain_step" in fams and fams["ktrain_step"][0].value >= 3:
                    found[node] = fams
            time.sleep(0.2)
        assert sorted(found) == [0, 1], job.logs()
        for node, fams in found.items():
            by_name = {s.labels["name"]: s for s in fams["ktrain_metric"]}
            assert sorted(by_name) == ["loss", "tokens_per_s"]
            loss = by_name["loss"]
            replica = f"prom-local-node-{node}"
            assert loss.labels == {"job": "prom-local", "replica": replica, "node": str(node),
                                   "rank": str(node), "name": "loss"}  # fmt: skip
            assert by_name["tokens_per_s"].value == 1000.0 * (node + 1)
            assert node < loss.value <= node + 1 / 3  # 1/step + rank, at step 3 or later
    finally:
        job.cancel()
        shell.reset(new_session=True)
