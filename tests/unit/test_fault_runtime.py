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


def _mpi_runtime(env: list[dict[str, str]]) -> dict[str, object]:
    """An Open MPI runtime as Trainer's removed ``mpi-distributed`` was: a launcher and nodes."""

    def job(name: str, container: str, extra: list[dict[str, str]]) -> dict[str, object]:
        pod = {"containers": [{"name": container, "image": "mpi:5", "env": extra}]}
        return {"name": name, "template": {"spec": {"template": {"spec": pod}}}}

    return {
        "spec": {
            "mlPolicy": {"numNodes": 2, "mpi": {"numProcPerNode": 1, "sshAuthMountPath": "/s"}},
            "template": {
                "spec": {
                    "replicatedJobs": [job("launcher", "launcher", env), job("node", "node", [])]
                }
            },
        }
    }


def test_an_open_mpi_runtimes_launcher_gets_open_mpi_5s_variables_too() -> None:
    mine = [{"name": "PRTE_MCA_plm_ssh_args", "value": "-p 2222"}]
    runtime = fault_runtime(_spec(procs_per_node=4), _mpi_runtime(mine), {})
    launcher, node = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    env = launcher["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    got = {e["name"]: e["value"] for e in env}
    assert got == {
        "PRTE_MCA_plm_ssh_args": "-p 2222",  # the runtime's own wins
        "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "false",
        "PRTE_MCA_prte_set_default_slots": "4",
    }
    assert node["template"]["spec"]["template"]["spec"]["containers"][0]["env"] == []
    torch = fault_runtime(_spec(), CLUSTER_RUNTIME, {})  # a torch runtime: nothing of MPI
    assert "PRTE" not in str(torch)
