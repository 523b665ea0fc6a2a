"""A TrainJob's own TrainingRuntime: the ClusterTrainingRuntime it names, with the failure policy
every other kind gets (:func:`fault_runtime`), and the job's objects pointing at it
(:func:`use_fault_runtime`). Pure functions of a spec and the cluster runtime as read.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ....kinds import KIND_TABLE
from ....pod.mpi import HOSTFILE
from ....spec.job import JobSpec
from ..labels import MAX_RESTARTS_ANNOTATION
from .run_policy import stops_itself

__all__ = ["fault_runtime", "use_fault_runtime"]

# exit codes of a killed process (128 + signal): a fault the JobSet restarts; any other
# non-zero code is a bug that fails the Job, hence the JobSet, at once
_FAULT_CODES = list(range(128, 256))
_RULES = [
    {"action": "Count", "onExitCodes": {"operator": "In", "values": _FAULT_CODES}},
    {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
]
BUG_REASON = "PodFailurePolicy"  # the Job's reason when a rule failed it
# A job whose nodes stop each other (run_policy.stops_itself): a bug fails only its node's index and
# every other node stops by itself (exit 3, a bug's code too), so the Job fails once every node
# ended, with every pod kept and its log readable. A Job that fails at once has the Job
# controller delete its running pods, and the JobSet then deletes every Job still active.
# A fault (a signal's code, a disruption) still fails the Job at once: the JobSet restarts it.
_PER_NODE_RULES = [
    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": _FAULT_CODES}},
    {"action": "FailIndex", "onExitCodes": {"operator": "NotIn", "values": [0]}},
]
BUG_REASON_PER_NODE = "FailedIndexes"


def _indexed(rjob: Mapping[str, Any]) -> bool:
    """A replicated job whose pods are indexed (JobSet's default), so each has its own limit."""
    spec = (rjob.get("template") or {}).get("spec") or {}
    return bool(spec.get("completionMode", "Indexed") == "Indexed")


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

    Where the nodes stop each other (the default: :func:`.run_policy.stops_itself`), a bug fails
    its node's index only (``backoffLimitPerIndex: 0``, ``FailIndex``): the other nodes are
    told and end by themselves, the Job fails (``FailedIndexes``) once all have, and no pod
    is deleted, so every rank's log stays readable, by ``kubectl logs`` and the Kubeflow SDK
    as by our views. A fault fails the Job at once, as before.
    """
    body = copy.deepcopy(dict(cluster_runtime.get("spec") or {}))
    template = body.setdefault("template", {}).setdefault("spec", {})
    rjobs = template.get("replicatedJobs") or []
    per_node = stops_itself(spec) and all(_indexed(r) for r in rjobs)
    template["failurePolicy"] = {
        "maxRestarts": spec.run_policy.max_restarts,
        "rules": [
            {"name": "bug", "action": "FailJobSet",
             "onJobFailureReasons": [BUG_REASON_PER_NODE if per_node else BUG_REASON]}
        ],
    }  # fmt: skip
    for rjob in rjobs:
        job = rjob.setdefault("template", {}).setdefault("spec", {})
        if per_node:
            job.pop("backoffLimit", None)  # the per-index limit's default: no total
            job["backoffLimitPerIndex"] = 0
            job["podFailurePolicy"] = {"rules": _PER_NODE_RULES}
        else:
            job["backoffLimit"] = 0
            job["podFailurePolicy"] = {"rules": _RULES}
        pod = job.setdefault("template", {}).setdefault("spec", {})
        pod["restartPolicy"] = "Never"
        account = ("serviceAccountName", "automountServiceAccountToken")
        if not spec.scheduling.service_account and not any(k in pod for k in account):
            pod["automountServiceAccountToken"] = False  # as every other kind's pods
    _open_mpi_5(body, spec.nproc)
    meta: dict[str, Any] = {"name": spec.name, "labels": dict(labels)}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    return {
        "apiVersion": KIND_TABLE[spec.kind].api_version,
        "kind": "TrainingRuntime",
        "metadata": meta,
        "spec": body,
    }


# Trainer (before v2.4) gives an Open MPI runtime's launcher Open MPI 4's variables only
# (OMPI_MCA_orte_*, OMPI_MCA_plm_rsh_args): Open MPI 5 ignores them and runs every rank on
# the launcher. Its v2.4 fix sets these too (keep_fqdn false: the hostfile's short names never
# match what PRRTE resolves for itself); a Trainer that sets them replaces ours.
_LAUNCHER_JOB = "launcher"


def _open_mpi_5(body: dict[str, Any], nproc: int) -> None:
    mpi = (body.get("mlPolicy") or {}).get("mpi")
    if mpi is None or mpi.get("mpiImplementation", "OpenMPI") != "OpenMPI":
        return
    env = {
        "PRTE_MCA_prte_default_hostfile": HOSTFILE,
        "PRTE_MCA_prte_keep_fqdn_hostnames": "false",
        "PRTE_MCA_prte_set_default_slots": str(nproc),
        "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
    }
    for rjob in body["template"]["spec"].get("replicatedJobs") or []:
        if rjob.get("name") != _LAUNCHER_JOB:
            continue
        pod = rjob["template"]["spec"]["template"]["spec"]
        for container in pod.get("containers") or []:
            if container.get("name") not in (_LAUNCHER_JOB, "node"):
                continue
            have = {e.get("name") for e in container.get("env") or []}
            extra = [{"name": k, "value": v} for k, v in env.items() if k not in have]
            container["env"] = [*(container.get("env") or []), *extra]


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
