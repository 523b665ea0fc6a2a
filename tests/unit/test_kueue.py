"""What Kueue's Workload says, as the cell and the panel say it. The Workload objects are the
shapes the real Kueue v0.17 wrote on the test cluster (trimmed to what is read)."""

from __future__ import annotations

import copy
from typing import Any

from jupyter_ktrain.backends.kubernetes.status.derive import build_status
from jupyter_ktrain.backends.kubernetes.status.kueue import (
    pending_position,
    queue_info,
    queued_message,
)
from jupyter_ktrain.backends.kubernetes.status.watch import owned_workload
from jupyter_ktrain.jobs import QUEUED, RUNNING
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel

SHORT = (
    "couldn't assign flavors to pod set master: insufficient unused quota for cpu in flavor "
    "default-flavor, 1 more needed"
)


def _cond(kind: str, status: str, reason: str, message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def workload(*conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-second-3f1c2",
            "creationTimestamp": "2026-11-25T16:42:55Z",
            "ownerReferences": [
                {"kind": "PyTorchJob", "name": "second", "controller": True, "uid": "u-2"}
            ],
        },
        "spec": {"queueName": "team-a", "podSets": [{"name": "master", "count": 1}]},
        "status": {"conditions": list(conditions), **status},
    }


PENDING_WL = workload(_cond("QuotaReserved", "False", "Pending", SHORT))
ADMITTED_WL = workload(
    _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
    _cond("Admitted", "True", "Admitted", "The workload is admitted"),
    admission={"clusterQueue": "cq", "podSetAssignments": []},
)
EVICTED_WL = workload(
    _cond("QuotaReserved", "False", "Pending", "Exceeded the PodsReady timeout ns/wl"),
    _cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/wl"),
    _cond("Admitted", "False", "NoReservation", "The workload has no reservation"),
    _cond("Requeued", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout ns/wl"),
    requeueState={"count": 1, "requeueAt": "2026-11-25T16:43:11Z"},
    schedulingStats={
        "evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}]
    },
)


def suspended_job(name: str = "second") -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "uid": "u-2", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}},
            "runPolicy": {"suspend": True},
        },
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
                {"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended"},
            ]
        },
    }


def test_a_workload_without_quota_is_queued_with_kueues_reason_and_position():
    info = queue_info(PENDING_WL, position=2)
    assert (info.admitted, info.evicted, info.queue) == (False, False, "team-a")
    reason, message = queued_message(info)
    assert reason == "Queued"
    assert message == f"waiting in LocalQueue 'team-a': {SHORT}; position 3 in the queue"


def test_an_evicted_workload_says_why_and_that_it_was_requeued_not_failed():
    info = queue_info(EVICTED_WL)
    assert info.evicted
    assert not info.admitted
    assert [(e.reason, e.count) for e in info.evictions] == [("PodsReadyTimeout", 1)]
    reason, message = queued_message(info)
    assert reason == "Evicted"
    assert "pods were not all ready within Kueue's waitForPodsReady timeout" in message
    assert message.endswith("requeued in LocalQueue 'team-a'")


def test_a_suspended_job_is_queued_until_admitted_then_pending_with_its_queue():
    job = suspended_job()
    queued = build_status(job, {}, {}, {}, {}, workload=PENDING_WL)
    assert queued.state == QUEUED
    assert SHORT in queued.message
    assert queued.admitted_by == ""

    running = copy.deepcopy(job)
    running["status"]["conditions"][-1]["status"] = "False"
    admitted = build_status(running, {}, {}, {}, {}, workload=ADMITTED_WL)
    assert (admitted.state, admitted.reason) == ("Pending", "Admitted")
    assert admitted.admitted_by == "ClusterQueue 'cq'"

    evicted = build_status(job, {}, {}, {}, {}, workload=EVICTED_WL)
    assert (evicted.state, evicted.reason) == (QUEUED, "Evicted")
    assert [e.reason for e in evicted.evictions] == ["PodsReadyTimeout"]


def test_the_job_is_matched_to_the_newest_workload_it_controls():
    other = copy.deepcopy(PENDING_WL)
    other["metadata"]["ownerReferences"][0]["name"] = "first"
    old = copy.deepcopy(EVICTED_WL)
    old["metadata"]["creationTimestamp"] = "2026-11-25T16:00:00Z"
    stale_uid = copy.deepcopy(ADMITTED_WL)
    stale_uid["metadata"]["ownerReferences"][0]["uid"] = "u-1"  # a job of the same name before
    stale_uid["metadata"]["creationTimestamp"] = "2026-11-25T17:00:00Z"
    got = owned_workload(suspended_job(), [other, old, PENDING_WL, stale_uid])
    assert got is not None
    assert got["status"] == PENDING_WL["status"]
    assert owned_workload(suspended_job("third"), [other, old]) is None


def test_the_visibility_answer_gives_the_position_in_the_local_queue():
    items = [
        {"metadata": {"name": "pytorchjob-first-aaaaa"}, "positionInLocalQueue": 0},
        {"metadata": {"name": "pytorchjob-second-3f1c2"}, "positionInLocalQueue": 1},
    ]
    assert pending_position(items, PENDING_WL) == 1
    assert pending_position(items[:1], PENDING_WL) is None


def test_the_monitor_says_when_the_job_was_admitted_and_each_eviction_once():
    m = MonitorModel(JobHeader("second"))
    m.set_state(QUEUED, 100.0, "waiting in LocalQueue 'team-a': ...")
    m.admitted("ClusterQueue 'cq'", 112.4)
    m.set_state(RUNNING, 113.0)
    m.admitted("ClusterQueue 'cq'", 114.0)  # still admitted: said once
    m.evicted("PodsReadyTimeout", "its pods were not all ready", 1, 130.0)
    m.evicted("PodsReadyTimeout", "its pods were not all ready", 1, 131.0)
    m.evicted("PodsReadyTimeout", "its pods were not all ready", 2, 160.0)
    said = [(a.code, a.message) for a in m.alerts()]
    assert said == [
        ("admitted", "admitted by Kueue to ClusterQueue 'cq' after 12s in the queue"),
        ("evicted", "evicted by Kueue: its pods were not all ready; requeued, not failed"),
        (
            "evicted",
            "evicted by Kueue: its pods were not all ready; requeued, not failed "
            "(eviction 2 for this reason)",
        ),
    ]


def test_a_kind_kueue_ignores_is_refused_with_the_kinds_it_queues():
    import pytest

    from jupyter_ktrain.errors import SpecError
    from jupyter_ktrain.flags import parse_flags, spec_from_args

    with pytest.raises(SpecError) as info:
        spec_from_args(parse_flags("--kind MPIJob --nodes 2 --kueue-queue team-a"))
    text = str(info.value)
    assert "Kueue does not manage MPIJob" in text
    assert "kubeflow.org/v2beta1" in text
    assert "--kind PyTorchJob or TFJob or TrainJob or XGBoostJob" in text


def test_a_configured_queue_is_every_cluster_jobs_unless_kueue_cannot_hold_it(
    monkeypatch, tmp_path, capsys
):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path))
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    sh.run_line_magic("ktrain", "config kueue_queue=team-a")
    base = "--backend kubernetes --nodes 2 --image local/python --dry-run"

    def labels(flags: str) -> tuple[dict[str, str], str]:
        job = sh.run_cell_magic("ktrain", f"{base} {flags}", "print(1)")
        (obj,) = [o for o in job.plan.request.objects if o["kind"] != "ConfigMap"]
        return obj["metadata"].get("labels") or {}, capsys.readouterr().out

    got, _ = labels("")
    assert got["kueue.x-k8s.io/queue-name"] == "team-a"
    got, _ = labels("--kueue-queue team-b")  # the flag wins
    assert got["kueue.x-k8s.io/queue-name"] == "team-b"
    got, out = labels("--kind MPIJob")
    assert "kueue.x-k8s.io/queue-name" not in got
    assert "config kueue_queue=team-a not applied: Kueue does not manage MPIJob" in out
    sh.reset(new_session=True)


def test_a_preemption_is_said_in_kueues_words_without_its_object_ids():
    said = (
        "Preempted to accommodate a workload (UID: 9305f8c4-8b25, JobUID: bcaa7b8b-eb27) due "
        "to prioritization in the ClusterQueue; preemptor path: /t-ca321680-team-a"
    )
    preempted = workload(
        _cond("Evicted", "True", "Preempted", said),
        _cond("Preempted", "True", "InClusterQueue", said),
    )
    reason, message = queued_message(queue_info(preempted))
    assert reason == "Evicted"
    assert message == (
        "evicted by Kueue: preempted to make room for a higher-priority workload (Preempted to "
        "accommodate a workload due to prioritization in the ClusterQueue); requeued in "
        "LocalQueue 'team-a'"
    )


def test_a_rayjobs_dashboard_is_a_link_said_once():
    job = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "ray"},
        "spec": {},
        "status": {
            "jobDeploymentStatus": "Running",
            "jobStatus": "RUNNING",
            "dashboardURL": "ray-abcde-head-svc.ns.svc.cluster.local:8265",
        },
    }
    status = build_status(job, {}, {}, {}, {})
    assert status.dashboard == "Ray dashboard: http://ray-abcde-head-svc.ns.svc.cluster.local:8265"
    m = MonitorModel(JobHeader("ray"))
    m.link(status.dashboard, 1.0)
    m.link(status.dashboard, 2.0)
    assert [(a.code, a.message) for a in m.alerts()] == [("link", status.dashboard)]
