"""Which worker cluster a MultiKueue job runs on, as Kueue says it: the manager Workload's
``status.clusterName``, else the admission check's message; and only for a job Kueue's webhook
left to MultiKueue (``managedBy``)."""

from __future__ import annotations

from jupyter_ktrain.backends.kubernetes.multikueue import (
    MULTIKUEUE,
    dispatched_to,
    managed_by,
    worker_of,
)

CHECK = {"name": "mk", "state": "Ready", "message": 'The workload got reservation on "east"'}


def test_the_worker_is_the_workloads_cluster_name_else_the_checks_message() -> None:
    assert worker_of({"status": {"clusterName": "west", "admissionChecks": [CHECK]}}) == "west"
    assert worker_of({"status": {"admissionChecks": [CHECK]}}) == "east"
    pending = {"name": "mk", "state": "Pending", "message": "waiting for a worker"}
    assert worker_of({"status": {"admissionChecks": [pending]}}) == ""
    assert worker_of(None) == ""


def test_only_a_job_left_to_multikueue_is_dispatched() -> None:
    workload = {"status": {"clusterName": "east"}}
    v1 = {"kind": "PyTorchJob", "spec": {"runPolicy": {"managedBy": MULTIKUEUE}}}
    trainjob = {"kind": "TrainJob", "spec": {"managedBy": MULTIKUEUE}}
    own = {"kind": "PyTorchJob", "spec": {"runPolicy": {}}}
    assert (managed_by(v1), managed_by(trainjob), managed_by(own)) == (MULTIKUEUE, MULTIKUEUE, "")
    assert dispatched_to(v1, workload) == "east"
    assert dispatched_to(trainjob, workload) == "east"
    assert dispatched_to(own, workload) == ""  # its own cluster's controller runs it
    assert dispatched_to(v1, None) == ""  # not admitted anywhere yet
