"""A job's ``runPolicy``, as every kind but the TrainJob and the RayJob writes it: which pods
stay when it ends (:func:`clean_pod_policy`, from whether its nodes stop each other:
:func:`stops_itself`), its restarts, deadline, TTL and gang scheduling. Pure."""

from __future__ import annotations

from typing import Any

from ....spec.job import JobSpec

__all__ = ["CLEAN_POD_POLICY", "SELF_STOPPING", "clean_pod_policy", "run_policy", "stops_itself",
           "with_run_policy"]  # fmt: skip


# The operator deletes the pods still running (or pending) when a job ends under ``Running``,
# and none under ``None``. Under ``Running`` a PyTorchJob, an XGBoostJob or a TFJob loses logs
# at every ending: the master's (the chief's) success ends the job while a worker is still
# tearing down or printing its last lines (its pod deleted, its lines with it, its rank killed
# in XGBoost's collective shutdown), and a bug's failure ends it while the other nodes still
# run. Their nodes stop themselves when one fails, and 30 s after node 0 succeeded (a TFJob's
# parameter servers, which never end by themselves) (``jupyter_ktrain.pod.agent.peers``: node 0
# is the Master at ``MASTER_ADDR``, a TFJob's chief in ``TF_CONFIG``), so they are made with
# ``None`` and every pod, with its log, stays until the job is deleted. An MPIJob keeps
# ``Running``: its workers only idle until deleted, and a failed job must keep no pod running.
CLEAN_POD_POLICY = "Running"
SELF_STOPPING = "None"


def clean_pod_policy(spec: JobSpec) -> str:
    """``--clean-pod-policy``, else :data:`SELF_STOPPING` for a job whose nodes stop each
    other (:func:`stops_itself`), else :data:`CLEAN_POD_POLICY`."""
    if spec.run_policy.clean_pod_policy:
        return spec.run_policy.clean_pod_policy
    return SELF_STOPPING if stops_itself(spec) else CLEAN_POD_POLICY


def stops_itself(spec: JobSpec) -> bool:
    """Whether ``spec``'s nodes tell each other of a failure and stop (the agent's
    ``KTRAIN_PEERS``): a PyTorchJob or an XGBoostJob with a Master (node 0 at ``MASTER_ADDR``),
    a TFJob (node 0 its chief, in ``TF_CONFIG``) or a TrainJob (node 0 at ``PET_MASTER_ADDR``;
    its JobSet fails it once every node ended, :mod:`.fault_runtime`), not a warm one (its
    agents outlive runs) nor an elastic one (no Master; its workers come and go), whose
    replicas a bug fails for good (``ExitCode``, ``Never``; under ``OnFailure`` or ``Always``
    the operator restarts a stopped node, deleting its pod)."""
    return (
        spec.kind in ("PyTorchJob", "XGBoostJob", "TFJob", "TrainJob")
        and spec.elastic is None
        and not spec.warm
        and spec.run_policy.restart_policy in (None, "ExitCode", "Never")
    )


def run_policy(spec: JobSpec, total_replicas: int) -> dict[str, Any]:
    rp, s = spec.run_policy, spec.scheduling
    out: dict[str, Any] = {"cleanPodPolicy": clean_pod_policy(spec)}
    if rp.ttl_seconds_after_finished is not None:
        out["ttlSecondsAfterFinished"] = rp.ttl_seconds_after_finished
    out["backoffLimit"] = rp.max_restarts
    if rp.active_deadline_seconds is not None:
        out["activeDeadlineSeconds"] = rp.active_deadline_seconds
    if s.gang:
        policy: dict[str, Any] = {"minAvailable": total_replicas}
        if s.queue:
            policy["queue"] = s.queue
        if s.priority_class:
            policy["priorityClass"] = s.priority_class
        out["schedulingPolicy"] = policy
    return out


def with_run_policy(body: dict[str, Any], spec: JobSpec, total: int) -> dict[str, Any]:
    rp = run_policy(spec, total)
    return {"runPolicy": rp, **body} if rp else body
