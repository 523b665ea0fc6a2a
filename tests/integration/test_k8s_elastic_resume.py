"""Elastic resume on the real Training Operator: a Worker-only PyTorchJob (``--elastic``) with
``--checkpoints`` on a PersistentVolumeClaim one of whose worker pods (not the one that hosts
the rendezvous store) is deleted after step 7
(a user's ``kubectl delete pod``, as a preemption does). The surviving pod keeps running:
torchrun restarts its rank (``--max-restarts``, the job's limit by default), the operator makes
the deleted pod anew, and the ranks rendezvous again and resume from the step-5 checkpoint.

- ``--elastic 2:2``: the new pod rejoins; the job goes Restarting, then Succeeded; the final
  model equals, bit for bit, an uninterrupted run's (the local backend's, same seed); the
  cell's loss series has each step once per rank, each equal to the uninterrupted run's.
- ``--elastic 1:2`` with no room left for a new pod (its node cordoned when the pod is
  deleted): the survivor goes on alone and finishes, and the cell says the world size changed.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.frontends.notebook import last_monitor

from ..resume_cells import SETUP
from .k8s_helpers import checkpoint_claim, configured_shell, wait_for

pytestmark = pytest.mark.slow

# one thread per rank on both backends: the same float operations in the same order
FLAGS = "--nodes 2 --procs-per-node 1 --env OMP_NUM_THREADS=1"
STEPS = [float(s) for s in range(12)]


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(SETUP, store_history=True).success
        yield sh


def _delete_held_pod(
    test_cluster: Any, marks: Path, cordon: bool = False, cordoned: list[str] | None = None
) -> threading.Thread:
    """Delete the pod whose rank stopped at ``hold_at`` (it names itself in ``marks/held``;
    the pods' processes run on this machine), after cordoning its node when asked (its name
    goes into ``cordoned``)."""

    def run() -> None:
        held = marks / "held"
        wait_for(held.exists, timeout=120, every=0.1)
        pod = held.read_text()
        if cordon:
            node = json.loads(test_cluster.kubectl("get", "pod", pod, "-o", "json").stdout)
            name = node["spec"]["nodeName"]
            done = test_cluster.kubectl("cordon", name, admin=True)
            assert done.returncode == 0, done.stderr
            if cordoned is not None:
                cordoned.append(name)
        test_cluster.faults.delete_pod(test_cluster.namespace, pod)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _losses() -> dict[int, tuple[list[float], list[float]]]:
    """rank -> (steps, losses) of the loss series the last cell's monitor showed."""
    shown = last_monitor()
    assert shown is not None
    model = shown[0]
    return {
        rank: tuple(map(list, series.points()))  # type: ignore[misc]
        for (rank, name), series in sorted(model.metrics.items())
        if name == "loss"
    }


def test_a_deleted_elastic_worker_is_made_anew_rejoins_and_ends_as_an_uninterrupted_run(
    k8s_shell, test_cluster, tmp_path, capsys
):
    claim = checkpoint_claim(test_cluster, tmp_path)
    deleter = _delete_held_pod(test_cluster, tmp_path)
    cell = f"w, first = train(12, 3, None, {str(tmp_path)!r}, hold_at=7)\n"
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"{FLAGS} --image local/python --elastic 2:2 --checkpoints {claim}:/checkpoints --name el",
        cell,
    )
    deleter.join(timeout=5)
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "el: Running (PyTorchJobRestarting)" in out, out
    held = (tmp_path / "held").read_text()
    kept = "el-worker-0" if held == "el-worker-1" else "el-worker-1"
    assert f"{held} restarted after exit 143, killed by signal 15 (SIGTERM)" in out, out
    assert f"{kept} restarted" not in out, out  # its torchrun restarted its rank in place
    assert "resumed from step 5 (checkpoint step-5.pt)" in out, out
    assert "world size changed" not in out, out
    assert k8s_shell.user_ns["first"] == 6  # the run that finished began after the checkpoint
    resumed, series = k8s_shell.user_ns["w"], _losses()
    # the same job, never interrupted, on the local backend
    k8s_shell.run_cell_magic("ktrain", f"{FLAGS} --backend local --name whole", "w, _ = train()\n")
    assert LocalBackend().status("whole").state == "Succeeded"
    whole, reference = k8s_shell.user_ns["w"], _losses()
    assert all(torch.equal(a, b) for a, b in zip(resumed, whole, strict=True))
    # each step once per rank, none lost, each loss the uninterrupted run's
    assert {r: xs for r, (xs, _) in series.items()} == {0: STEPS, 1: STEPS}
    assert series == reference


def test_an_elastic_job_with_no_room_for_the_new_pod_goes_on_with_one_worker(
    k8s_shell, test_cluster, tmp_path, capsys
):
    claim = checkpoint_claim(test_cluster, tmp_path)
    cordoned: list[str] = []
    deleter = _delete_held_pod(test_cluster, tmp_path, cordon=True, cordoned=cordoned)
    cell = f"w, first = train(12, 3, None, {str(tmp_path)!r}, hold_at=7)\n"
    # torchrun waits last_call_timeout (30 s by default) for more nodes once it has the
    # minimum: 5 s here, where both pods start within a second of each other
    flags = f"{FLAGS} --env PET_RDZV_CONF=last_call_timeout=5 --image local/python"
    try:
        job = k8s_shell.run_cell_magic(
            "ktrain",
            f"{flags} --elastic 1:2 --checkpoints {claim}:/checkpoints --name shrink",
            cell,
        )
    finally:
        deleter.join(timeout=5)
        for node in cordoned:
            test_cluster.kubectl("uncordon", node, admin=True)
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    text = "resumed from step 5 (checkpoint step-5.pt); the world size changed from 2 to 1"
    assert text in out, out
    assert "first" in k8s_shell.user_ns, out + job.logs()  # rank 0's results came back
    assert k8s_shell.user_ns["first"] == 6
    steps, _ = _losses()[0]
    assert steps == STEPS  # the survivor's series: each step once
