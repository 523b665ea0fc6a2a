"""A TrainJob's own TrainingRuntime: the ClusterTrainingRuntime it names, with the failure policy
every other kind gets (:func:`fault_runtime`), and the job's objects pointing at it
(:func:`use_fault_runtime`). Pure functions of a spec and the cluster runtime as read.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ...kinds import KIND_TABLE
from ...spec import JobSpec
from .labels import MAX_RESTARTS_ANNOTATION

__all__ = ["fault_runtime", "use_fault_runtime"]

# exit codes of a killed process (128 + signal): a fault the JobSet restarts; any other
# non-zero code is a bug that fails the Job, hence the JobSet, at once
_FAULT_CODES = list(range(128, 256))


def fault_runtime(
    spec: JobSpec, cluster_runtime: Mapping[str, Any], labels: Mapping[str, str]
) -> dict[str, Any]:
    """A namespaced TrainingRuntime named after the job: the ClusterTrainingRuntime's spec (the
    admin's images, initializers, ML policy) with the failure policy every other kind gets.

    Trainer v2.3 lets a job set no restart policy, and JobSet's default (``OnFailure`` pods,
    the Job's default backoffLimit 6) restarts a raising rank in place until the Job fails.
    Here each Job has ``restartPolicy: Never`` (and no API token unless the runtime or
    ``--service-account`` names an account), ``backoffLimit: 0`` and a pod failure policy
    that fails the Job at once on a bug (exit 1-127) and counts a fault (exit >= 128, a
    deleted pod); the JobSet fails on the first and restarts every Job on the second, up to
    ``--max-restarts`` times (all ranks rejoin, as torchrun's static rendezvous needs).
    """
    body = copy.deepcopy(dict(cluster_runtime.get("spec") or {}))
    template = body.setdefault("template", {}).setdefault("spec", {})
    template["failurePolicy"] = {
        "maxRestarts": spec.run_policy.max_restarts,
        "rules": [
            {"name": "bug", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
        ],
    }
    for rjob in template.get("replicatedJobs") or []:
        job = rjob.setdefault("template", {}).setdefault("spec", {})
        job["backoffLimit"] = 0
        job["podFailurePolicy"] = {
            "rules": [
                {"action": "Count", "onExitCodes": {"operator": "In", "values": _FAULT_CODES}},
                {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
            ]
        }
        pod = job.setdefault("template", {}).setdefault("spec", {})
        pod["restartPolicy"] = "Never"
        account = ("serviceAccountName", "automountServiceAccountToken")
        if not spec.scheduling.service_account and not any(k in pod for k in account):
            pod["automountServiceAccountToken"] = False  # as every other kind's pods
    meta: dict[str, Any] = {"name": spec.name, "labels": dict(labels)}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    return {
        "apiVersion": KIND_TABLE[spec.kind].api_version,
        "kind": "TrainingRuntime",
        "metadata": meta,
        "spec": body,
    }


def use_fault_runtime(
    objects: list[dict[str, Any]], spec: JobSpec, cluster_runtime: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``objects`` (a TrainJob last) with its fault runtime first and the job pointing at it."""
    *rest, job = objects
    runtime = fault_runtime(spec, cluster_runtime, job["metadata"].get("labels") or {})
    job = copy.deepcopy(job)
    notes = job["metadata"].setdefault("annotations", {})
    notes[MAX_RESTARTS_ANNOTATION] = str(spec.run_policy.max_restarts)  # for the monitor
    job["spec"]["runtimeRef"] = {
        "name": runtime["metadata"]["name"],
        "apiGroup": KIND_TABLE[spec.kind].group,
        "kind": "TrainingRuntime",
    }
    return [runtime, *rest, job]
