"""Sweeps on the test cluster (real kube-apiserver, Training Operator, Kueue, our process
kubelet), driven through %%ktrain: with ``--warm`` every trial is a run on one of the sweep's
two warm PyTorchJobs (a failed trial and a pruned one among them); without it every trial is a
PyTorchJob of its own, queued through a Kueue LocalQueue whose quota holds one trial at a
time, all-or-nothing."""

from __future__ import annotations

import json
from itertools import combinations
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.store.sweeps import read_sweep
from jupyter_ktrain.sweep.record import seen_state, sweep_of
from jupyter_ktrain.sweep.trials import Sweep

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow

CELLS = """
import time
import jupyter_ktrain as ktrain

def graded(x):
    # x=3 fails; x=4's loss stays high (slowly) while the others' falls: it is pruned
    if x == 3:
        raise ValueError("x=3 is refused")
    steps, pause = (300, 0.1) if x == 4 else (12, 0.05)
    for step in range(steps):
        loss = 10.0 if x == 4 else x / (step + 1)
        ktrain.report(step=step, loss=loss)
        time.sleep(pause)
    return x
"""

ONE = "--nodes 1 --procs-per-node 1 --image local/python"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(CELLS, store_history=True).success
        yield sh


def _jobs(test_cluster) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl("get", "pytorchjobs", "-o", "json")
    assert got.returncode == 0, got.stderr
    return {j["metadata"]["name"]: j for j in json.loads(got.stdout)["items"]}


def test_a_warm_sweep_runs_its_trials_on_two_warm_pytorchjobs_prunes_and_fails_one(
    k8s_shell, test_cluster, capsys
):
    flags = (
        f'{ONE} --warm --name ws --sweep "x=choice(1,2,3,4)" --parallel 2 '
        "--objective loss:min --prune-after 3"
    )
    sweep = k8s_shell.run_cell_magic("ktrain", flags, "y = graded(x)\n")
    assert isinstance(sweep, Sweep)
    by_x = {t.params["x"]: t for t in sweep.trials}
    assert sorted(by_x) == [1, 2, 3, 4]
    assert {t.job for t in sweep.trials} == {"ws-w0", "ws-w1"}  # runs on two warm jobs
    for job in ("ws-w0", "ws-w1"):  # each trial a run of its own, run after run on its job
        runs = sorted(t.run or 0 for t in sweep.trials if t.job == job)
        assert runs == list(range(1, len(runs) + 1)), sweep.trials
    for x in (1, 2):
        assert (by_x[x].state, by_x[x].objective) == ("Succeeded", pytest.approx(x / 12))
        assert by_x[x].handle is not None
        assert by_x[x].handle.result == x
    assert by_x[3].state == "Failed"
    assert "ValueError: x=3 is refused" in by_x[3].error
    assert by_x[4].state == "Pruned"
    assert by_x[4].objective == 10.0
    assert "worse than the other trials' median" in by_x[4].error
    assert sweep.best is not None
    assert sweep.best.params["x"] == 1
    assert k8s_shell.user_ns["y"] == 1  # the best trial's names, bound in the kernel
    out = capsys.readouterr().out
    assert "Sweep 'ws': 4 trial(s), 2 at a time on 2 warm job(s) ws-w0..w1" in out
    assert f"trial {by_x[4].number} Pruned, loss=10" in out
    assert "2 succeeded, 1 pruned, 1 failed" in out
    assert "Ended the sweep's warm job(s) ws-w0, ws-w1." in out
    record = read_sweep("ws")
    assert record is not None
    assert (seen_state(record), record.warm, record.backend) == ("Done", True, "kubernetes")
    assert [(t.number, t.state, t.job, t.run) for t in sweep_of(record).trials] == [
        (t.number, t.state, t.job, t.run) for t in sweep.trials
    ]
    assert record.best == sweep.best.number
    (row,) = [r for r in record.rows if r.number == by_x[4].number]
    assert row.ended - row.started < 25, row  # stopped: its 300 steps take 30 s
    # the sweep's warm jobs ended with it: deleted, with what they own
    wait_for(lambda: not {"ws-w0", "ws-w1"} & set(_jobs(test_cluster)), timeout=60, every=0.5)


def _workloads(test_cluster) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl("get", "workloads", "-o", "json")
    assert got.returncode == 0, got.stderr
    return list(json.loads(got.stdout)["items"])


def _held(wl: dict[str, Any]) -> tuple[str, str, str]:
    """When a Workload was admitted and when it ended (RFC 3339 times: they sort as text)."""
    at = {c["type"]: c["lastTransitionTime"] for c in wl["status"]["conditions"]}
    return at["Admitted"], at["Finished"], wl["metadata"]["name"]


def test_trials_without_warm_are_jobs_queued_through_kueue_one_at_a_time(
    k8s_shell, test_cluster, capsys
):
    test_cluster.kueue_queue("team-a", cpu="1")  # quota for one 1-CPU trial at a time
    flags = (
        f'{ONE} --cpu 1 --kueue-queue team-a --name qs --sweep "x=choice(1,2,3)" '
        "--parallel 2 --objective loss:min --no-prune"
    )
    sweep = k8s_shell.run_cell_magic("ktrain", flags, "y = graded(x)\n")
    by_x = {t.params["x"]: t for t in sweep.trials}
    assert sorted(by_x) == [1, 2, 3]
    assert {t.job for t in sweep.trials} == {"qs-t0", "qs-t1", "qs-t2"}  # a job each
    assert all(t.run is None for t in sweep.trials)
    for x in (1, 2):
        assert (by_x[x].state, by_x[x].objective) == ("Succeeded", pytest.approx(x / 12))
    assert by_x[3].state == "Failed"
    assert "ValueError: x=3 is refused" in by_x[3].error
    assert k8s_shell.user_ns["y"] == 1
    out = capsys.readouterr().out
    assert "Sweep 'qs': 3 trial(s), 2 at a time on a job each (qs-t0..t2)" in out

    # every trial went through the queue: Kueue admitted its job's Workload and saw it end
    loads = _workloads(test_cluster)
    owners = {o["name"] for w in loads for o in w["metadata"].get("ownerReferences") or []}
    assert owners == {"qs-t0", "qs-t1", "qs-t2"}, owners
    for wl in loads:
        conds = {c["type"]: c["status"] for c in wl["status"]["conditions"]}
        assert conds.get("Finished") == "True", conds
    # all-or-nothing, one at a time: no two trials held the queue's quota at once (--parallel
    # 2 made the second wait in the queue until the first's job ended): each Workload from its
    # admission to its end, as Kueue stamped them
    spans = sorted(_held(wl) for wl in loads)
    for (s1, e1, a), (s2, e2, b) in combinations(spans, 2):
        assert s2 >= e1, (a, s1, e1, b, s2, e2)
    # and one of them was made while another held the quota: it waited in the queue
    made = {wl["metadata"]["name"]: wl["metadata"]["creationTimestamp"] for wl in loads}
    assert any(made[name] < admitted for admitted, _, name in spans), (made, spans)
    record = read_sweep("qs")
    assert record is not None
    assert (seen_state(record), record.warm) == ("Done", False)
    assert sorted(r.state for r in record.rows) == ["Failed", "Succeeded", "Succeeded"]
