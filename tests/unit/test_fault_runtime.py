"""A TrainJob's own TrainingRuntime: Trainer's torch-distributed ClusterTrainingRuntime, as
the test cluster installs it from Trainer's module, plus the failure policy of every kind."""

from __future__ import annotations

from jupyter_ktrain.backends.kubernetes.fault_runtime import fault_runtime, use_fault_runtime
from jupyter_ktrain.backends.kubernetes.validate import validate_objects
from jupyter_ktrain.spec import JobSpec, RunPolicy

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


def test_a_bug_fails_the_job_and_a_fault_restarts_the_jobset_up_to_the_limit() -> None:
    rt = fault_runtime(_spec(run_policy=RunPolicy(backoff_limit=5)), CLUSTER_RUNTIME, {"a": "b"})
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
