"""Progress of a PyTorchJob that no process of the reader follows: a second client (the side
panel's server, another kernel's ``%ktrain list``) shows percent and ETA from the last lines
of the rank-0 pod, through the real API server, while it runs and at the end of its run."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.config import load_config
from jupyter_ktrain.server.core import PanelCore
from tests.notebook_cells import PACED_LOOP

from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def test_a_job_nobody_here_follows_shows_progress_in_lists(k8s_shell, capsys):
    assert k8s_shell.run_cell(PACED_LOOP, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 2 --procs-per-node 1 --image local/python --name paced --detach",
        "steps = paced(70, 0.5)\n",
    )
    other = KubernetesBackend(load_config())  # its own connection: follows nothing
    panel = PanelCore({"kubernetes": lambda: KubernetesBackend(load_config())})
    seen = []
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline, seen
        (listed,) = [s for s in other.list_jobs() if s.name == "paced"]
        if listed.terminal:
            break
        (row,) = [j for j in panel.jobs()["jobs"] if j["name"] == "paced"]
        if listed.progress is not None and row["progress"] is not None:
            seen.append((listed.progress.step, row["progress"]["percent"], row["progress"]))
        time.sleep(1.0)
    assert job.wait(timeout=60) == "Succeeded", capsys.readouterr().out
    running = [s for s in seen if s[1] is not None and s[1] < 100]
    assert len(running) >= 2, seen  # seen while it ran, refreshed as it went
    assert running[-1][0] > running[0][0], seen
    assert all(1 <= step <= 70 for step, _pct, _row in running)
    assert any(row["eta_s"] is not None for _s, _p, row in running), seen
    assert all("/70)" in row["text"] for _s, _p, row in running), running
    # once over: the last progress read while it ran is kept, not re-read for every list
    (done,) = [s for s in other.list_jobs() if s.name == "paced"]
    assert done.progress is not None
    assert done.progress.total == 70
