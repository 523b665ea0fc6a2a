"""A TrainJob's own TrainingRuntime: Trainer's torch-distributed ClusterTrainingRuntime, as
the test cluster installs it from Trainer's module, plus the failure policy of every kind."""

from __future__ import annotations

from jupyter_ktrain.backends.kubernetes.plans.fault_runtime import fault_runtime, use_fault_runtime
from jupyter_ktrain.backends.kubernetes.plans.validate import validate_objects
from jupyter_ktrain.spec.job import JobSpec, RunPolicy

CLUSTER_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {"name": "node", "image": "pytorch/pytorch:2.13.0"}
                                        ]
                                    }
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}


def _spec(**kw: object) -> JobSpec:
    return JobSpec.create(
        name="tj", kind="TrainJob", namespace="team", nodes=2, image="local/python", **kw
    )


def test_a_bug_fails_its_node_the_others_stop_and_the_job_fails_with_every_pod_kept() -> None:
    """The default: the nodes stop each other (KTRAIN_PEERS), so a bug fails its node's index
    only and the Job fails once every node ended, none deleted; a fault fails it at once."""
    rt = fault_runtime(_spec(run_policy=RunPolicy(backoff_limit=5)), CLUSTER_RUNTIME, {"a": "b"})
    validate_objects([rt])
    spec = rt["spec"]["template"]["spec"]
    assert spec["failurePolicy"]["maxRestarts"] == 5
    (rule,) = spec["failurePolicy"]["rules"]
    assert (rule["action"], rule["onJobFailureReasons"]) == ("FailJobSet", ["FailedIndexes"])
    (job,) = spec["replicatedJobs"]
    body = job["template"]["spec"]
    assert "backoffLimit" not in body
    assert body["backoffLimitPerIndex"] == 0
    disrupted, fault, bug = body["podFailurePolicy"]["rules"]
    assert disrupted == {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}
    assert (fault["action"], fault["onExitCodes"]["values"]) == ("FailJob", list(range(128, 256)))
    assert bug == {"action": "FailIndex", "onExitCodes": {"operator": "NotIn", "values": [0]}}
    assert body["template"]["spec"]["restartPolicy"] == "Never"


def test_a_job_whose_nodes_do_not_stop_each_other_fails_at_once_on_a_bug() -> None:
    warm = _spec(run_policy=RunPolicy(backoff_limit=5), warm=True)  # its agents outlive runs
    rt = fault_runtime(warm, CLUSTER_RUNTIME, {"a": "b"})
    validate_objects([rt])  # what the API server's schema for TrainingRuntime accepts
    assert (rt["kind"], rt["metadata"]["name"], rt["metadata"]["namespace"]) == (
        "TrainingRuntime",
        "tj",
        "team",
    )
    spec = rt["spec"]["template"]["spec"]
    assert spec["failurePolicy"]["maxRestarts"] == 5
    assert spec["failurePolicy"]["rules"][0]["action"] == "FailJobSet"
    (job,) = spec["replicatedJobs"]
    assert job["template"]["spec"]["backoffLimit"] == 0
    count, fail = job["template"]["spec"]["podFailurePolicy"]["rules"]
    assert count["action"] == "Count"
    assert count["onExitCodes"]["values"] == list(range(128, 256))
    assert fail == {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}
    assert job["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # the admin's runtime is kept as it is otherwise: image, ML policy, labels
    pod = job["template"]["spec"]["template"]["spec"]
    assert pod["containers"] == [{"name": "node", "image": "pytorch/pytorch:2.13.0"}]
    assert rt["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
    assert CLUSTER_RUNTIME["spec"]["template"]["spec"].get("failurePolicy") is None  # a copy


def test_the_job_points_at_its_runtime_and_carries_the_limit_for_the_monitor() -> None:
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "labels": {"ktrain.io/job": "tj"}},
        "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "ClusterTrainingRuntime"}},
    }
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tj-code"}}
    runtime, config, out = use_fault_runtime([cm, job], _spec(), CLUSTER_RUNTIME)
    assert (runtime["kind"], config, out["kind"]) == ("TrainingRuntime", cm, "TrainJob")
    assert out["spec"]["runtimeRef"] == {
        "name": "tj",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    assert out["metadata"]["annotations"]["ktrain.io/max-restarts"] == "3"
    assert runtime["metadata"]["labels"] == {"ktrain.io/job": "tj"}
    assert job["spec"]["runtimeRef"]["kind"] == "ClusterTrainingRuntime"  # not changed in place
