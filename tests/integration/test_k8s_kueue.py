"""Kueue on the test cluster, for real: its controller (with its webhooks) admits, queues and
evicts jobs submitted with ``--kueue-queue``; the cell says what Kueue says, as it happens."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.registry import get_backend
from jupyter_ktrain.errors import JobCancelled, JobNotFound
from jupyter_ktrain.server.core import PanelCore

from ..cluster.cluster import Node
from ..cluster.controlplane import KUEUE_PODS_READY_TIMEOUT_S
from .k8s_helpers import configured_shell, panel_listing, wait_for

pytestmark = pytest.mark.slow

# 2 pods of 1 CPU each: a queue with a quota of 2 CPUs fits one such job at a time
QUEUED = "--nodes 2 --procs-per-node 1 --image local/python --cpu 1 --kueue-queue team-a"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):  # its cells: steps() (k8s_helpers)
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _status(name: str):
    try:
        return get_backend("kubernetes").attach(name).status()
    except JobNotFound:
        return None


def test_a_job_over_the_queues_quota_waits_queued_with_kueues_reason_then_runs(
    k8s_shell, test_cluster, capsys
):
    test_cluster.kueue_queue("team-a", cpu="2")
    # detached, nobody follows it: with the default cleanPodPolicy Running, a worker still
    # printing as the master's success ends the job is deleted, its log with it (README);
    # this test reads both ranks' logs after, so every pod of it is kept
    k8s_shell.run_cell_magic(
        "ktrain", f"{QUEUED} --name first --detach --clean-pod-policy None", "steps(16, 0.5)\n"
    )
    first = wait_for(lambda: (s := _status("first")) and s.state == "Running" and s, 90)
    assert not first.evictions
    capsys.readouterr()

    # the side panel's job list, polled while the cell runs, as the panel polls it
    with panel_listing("second") as listed:
        k8s_shell.run_cell_magic("ktrain", f"{QUEUED} --name second", "steps(3, 0.1)\n")
    out = capsys.readouterr().out

    # the cell said it waited, in Kueue's own words: which resource is short, by how much
    queued = [line for line in out.splitlines() if "second: Queued" in line]
    assert queued, out
    assert "waiting in LocalQueue 'team-a'" in queued[0], queued
    # Kueue's reason comes with its scheduler's first try; a Workload it has not tried yet
    # reads "waiting for quota", and the cell says the reason once Kueue gave it
    assert any("insufficient unused quota for cpu" in line for line in queued), queued
    # and its place in the queue, from Kueue's visibility API (next in line)
    assert any("position 1 in the queue" in line for line in queued), queued
    assert "admitted by Kueue to ClusterQueue 't-" in out, out
    queued_in_panel = [m for state, m in listed if state == "Queued"]
    assert queued_in_panel, listed
    assert any("insufficient unused quota for cpu" in m for m in queued_in_panel), listed
    for rank in (0, 1):
        assert f"rank {rank} step 2" in out, out
    # it started only once the first had finished and given its quota back
    done, second = _status("first"), _status("second")
    assert done is not None
    assert done.state == "Succeeded", done
    assert second is not None
    assert second.state == "Succeeded", second
    assert done.finished is not None
    assert second.started is not None
    assert second.started >= done.finished - 1, (done.finished, second.started)
    logs = get_backend("kubernetes").attach("first").logs()
    for rank in (0, 1):
        assert f"rank {rank} step 15" in logs, logs[-2000:]


def test_pods_not_ready_in_time_are_evicted_requeued_and_followed_not_failed(
    k8s_shell, test_cluster, capsys
):
    # the queue's quota (4 CPUs) promises more than the one node has (1 CPU): Kueue admits the
    # job, the scheduler places neither 2-CPU pod, and Kueue's waitForPodsReady timeout evicts
    # it and requeues it. (For a Kubeflow v1 job Kueue reads "pods ready" from the operator's
    # Running condition, which a running master alone sets: only a job none of whose master
    # could start is evicted.)
    test_cluster.set_nodes([Node(cpu="1")])
    test_cluster.kueue_queue("team-a", cpu="4")
    outcome: dict[str, BaseException] = {}

    def cell() -> None:
        try:
            opts = f"{QUEUED} --cpu 2 --name stuck"
            k8s_shell.run_cell_magic("ktrain", opts, "steps(3, 0.1)\n")
        except BaseException as exc:  # what the cell raised, looked at below
            outcome["error"] = exc

    runner = threading.Thread(target=cell)
    runner.start()
    seen: list[str] = []

    def evicted() -> bool:
        seen.append(capsys.readouterr().out)
        return "evicted by Kueue" in "".join(seen)

    started = time.monotonic()
    try:
        wait_for(evicted, KUEUE_PODS_READY_TIMEOUT_S + 60, every=0.5)
    except AssertionError:
        raise AssertionError(("".join(seen), outcome, _status("stuck"))) from None
    took = time.monotonic() - started
    status = _status("stuck")
    cancelled = PanelCore.from_names(["kubernetes"]).cancel("stuck")  # the panel's cancel
    runner.join(60)
    seen.append(capsys.readouterr().out)
    out = "".join(seen)

    assert took >= KUEUE_PODS_READY_TIMEOUT_S - 5, took
    assert "pods were not all ready within Kueue's waitForPodsReady timeout" in out, out
    assert "requeued" in out, out
    # followed, never called failed: the job ends only when it is cancelled
    assert status is not None
    assert status.state != "Failed", status
    assert [e.reason for e in status.evictions] == ["PodsReadyTimeout"], status
    assert "stuck: Failed" not in out, out
    # cancelled from the panel (a cancel deletes a cluster job): the cell says so
    assert isinstance(outcome.get("error"), JobCancelled), outcome
    assert "stuck: Cancelled" in out, out
    assert cancelled["state"] == "Cancelled", cancelled


@pytest.mark.parametrize("kind", ["--kind TFJob", "--kind TrainJob --runtime torch-distributed"])
def test_every_kind_goes_through_the_queue_to_succeeded_with_every_ranks_logs(
    k8s_shell, test_cluster, capsys, kind
):
    test_cluster.kueue_queue("team-a", cpu="2")
    name = kind.split()[1].lower()
    k8s_shell.run_cell_magic("ktrain", f"{kind} {QUEUED} --name {name}", "steps(2, 0.1)\n")
    out = capsys.readouterr().out

    for rank in (0, 1):
        assert f"rank {rank} step 1" in out, out
    # Kueue admitted it (the job was created suspended and unsuspended by Kueue) and saw it end
    got = test_cluster.kubectl("get", "workloads", "-o", "json")
    (wl,) = json.loads(got.stdout)["items"]
    conds = {c["type"]: c["status"] for c in wl["status"]["conditions"]}
    assert conds.get("Admitted") == "True" or conds.get("Finished") == "True", conds
    assert conds.get("Finished") == "True", conds


def test_a_job_preempted_by_a_higher_priority_one_says_so_then_runs_again(
    k8s_shell, test_cluster, capsys
):
    test_cluster.kueue_queue("team-a", cpu="2")
    high = test_cluster.priority_class("urgent", 1000)
    outcome: dict[str, Any] = {}

    def cell() -> None:
        try:
            outcome["result"] = k8s_shell.run_cell_magic(
                "ktrain", f"{QUEUED} --name low", "steps(24, 0.25)\n"
            )
        except BaseException as exc:  # what the cell raised, looked at below
            outcome["error"] = exc

    runner = threading.Thread(target=cell)
    runner.start()
    seen: list[str] = []

    def said(text: str) -> Callable[[], bool]:
        def check() -> bool:
            seen.append(capsys.readouterr().out)
            return text in "".join(seen)

        return check

    wait_for(said("rank 1 step 2"), 90, every=0.3)
    # another team's urgent batch Job takes the whole quota: Kueue preempts ours
    urgent = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "urgent", "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
        "spec": {
            "template": {
                "spec": {
                    "priorityClassName": high,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "local/python",
                            "command": ["python", "-c", "import time; time.sleep(3)"],
                            "resources": {"requests": {"cpu": "2"}},
                        }
                    ],
                }
            }
        },
    }
    done = test_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(urgent))
    assert done.returncode == 0, done.stderr
    runner.join(240)
    seen.append(capsys.readouterr().out)
    out = "".join(seen)

    assert not runner.is_alive()
    assert "error" not in outcome, (outcome, out)
    assert "evicted by Kueue: preempted to make room for a higher-priority workload" in out, out
    assert out.index("preempted to make room") < out.rindex("admitted by Kueue"), out
    # its pods were taken back by the queue, not restarted by a fault: no restart counted
    assert "restarted after" not in out, out
    # the whole job ran again once the urgent one had finished, and succeeded
    for rank in (0, 1):
        assert f"rank {rank} step 23" in out, out
    assert _status("low").state == "Succeeded"
    got = json.loads(test_cluster.kubectl("get", "job", "urgent", "-o", "json").stdout)
    assert got["status"].get("succeeded") == 1, got["status"]
