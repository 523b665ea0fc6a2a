"""No line lost at any ending: a detached 2-node PyTorchJob (and a TFJob) that nobody followed,
read after it ended, as a third party reads it (the Kubeflow SDK's ``TrainingClient.get_job_logs``,
``kubectl logs``) and through our own view (``Job.logs``): every rank's log is there after a
success and after a failure, and the failed job keeps no pod running (its nodes stop each
other: ``jupyter_ktrain.pod.agent.peers``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.registry import get_backend
from jupyter_ktrain.errors import JobNotFound

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow

FLAGS = "--nodes 2 --procs-per-node 1 --image local/python --detach"

# rank 1 raises while rank 0 waits for it in a collective: rank 0 loses its peer (a restartable
# fault by itself) just as rank 1's bug fails the job
IN_COLLECTIVE = """
def fail_in_collective():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} starting", flush=True)
    if rank == 1:
        print("about to fail: the loader found no data", flush=True)
        raise ValueError("no data")
    dist.barrier()
"""


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):  # its cells: train(), fail_on()
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _ended(name: str) -> str:
    """The job's state once it has ended (Succeeded, Failed)."""

    def state() -> str | None:
        try:
            s = get_backend("kubernetes").attach(name).status()
        except JobNotFound:
            return None
        return s.state if s.state in ("Succeeded", "Failed") else None

    return str(wait_for(state, 120, every=0.2))


def _pod_list(test_cluster: Any, name: str) -> list[dict[str, Any]]:
    r = test_cluster.kubectl(
        "get", "pods", "-l", f"training.kubeflow.org/job-name={name}", "-o", "json"
    )
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout)["items"])


def _pods(test_cluster: Any, name: str) -> dict[str, str]:
    """pod -> phase of job ``name``'s pods."""
    return {
        p["metadata"]["name"]: p["status"].get("phase", "") for p in _pod_list(test_cluster, name)
    }


def _exit_codes(test_cluster: Any, name: str) -> dict[str, int]:
    """pod -> its container's exit code (the pods have ended)."""
    return {
        p["metadata"]["name"]: p["status"]["containerStatuses"][0]["state"]["terminated"][
            "exitCode"
        ]
        for p in _pod_list(test_cluster, name)
    }


def _sdk_logs(test_cluster: Any, name: str) -> dict[str, str]:
    from kubeflow.training import TrainingClient

    tc = TrainingClient(config_file=str(test_cluster.kubeconfig), namespace=test_cluster.namespace)
    logs, _ = tc.get_job_logs(name, is_master=False)
    return logs


# a TFJob's worker prints its last line 3 s after the chief succeeded, which ends the job
LATE_WORKER = """
def late_worker():
    import json, os, time
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    if task["type"] == "worker":
        time.sleep(3)
        print("worker: its last line, after the chief's success", flush=True)
    else:
        print("chief: done", flush=True)
"""


def test_a_tfjob_workers_last_line_stays_after_the_chief_succeeded(k8s_shell, test_cluster) -> None:  # type: ignore[no-untyped-def]
    assert k8s_shell.run_cell(LATE_WORKER).success
    flags = f"{FLAGS} --kind TFJob --name kept-tf"
    k8s_shell.run_cell_magic("ktrain", flags, "late_worker()\n")
    assert _ended("kept-tf") == "Succeeded"
    # the worker is not deleted with the job's end: it ends by itself, and its log stays
    wait_for(lambda: "Running" not in _pods(test_cluster, "kept-tf").values(), 60)
    assert _exit_codes(test_cluster, "kept-tf") == {"kept-tf-chief-0": 0, "kept-tf-worker-0": 0}
    from kubeflow.training import TrainingClient

    tc = TrainingClient(config_file=str(test_cluster.kubeconfig), namespace=test_cluster.namespace)
    logs, _ = tc.get_job_logs("kept-tf", is_master=False, job_kind="TFJob")
    assert sorted(logs) == ["kept-tf-chief-0", "kept-tf-worker-0"], logs
    late = "worker: its last line, after the chief's success"
    assert late in logs["kept-tf-worker-0"], logs["kept-tf-worker-0"]
    r = test_cluster.kubectl("logs", "kept-tf-worker-0")
    assert r.returncode == 0, r.stderr
    assert late in r.stdout, r.stdout
    assert late in get_backend("kubernetes").attach("kept-tf").logs()


def test_every_ranks_log_stays_after_a_success(k8s_shell, test_cluster) -> None:  # type: ignore[no-untyped-def]
    k8s_shell.run_cell_magic("ktrain", f"{FLAGS} --name kept-ok", "train(1)\n")
    assert _ended("kept-ok") == "Succeeded"
    # the worker ends by itself shortly after the master's success ended the job
    wait_for(lambda: "Running" not in _pods(test_cluster, "kept-ok").values(), 60)
    logs = _sdk_logs(test_cluster, "kept-ok")
    assert sorted(logs) == ["kept-ok-master-0", "kept-ok-worker-0"], logs
    for rank, pod in enumerate(("kept-ok-master-0", "kept-ok-worker-0")):
        assert f"[rank{rank}]: rank {rank} of 2 sum 3.0" in logs[pod], logs[pod]
        assert "[agent]: node command exited with code 0" in logs[pod], logs[pod]
    r = test_cluster.kubectl("logs", "kept-ok-worker-0")
    assert r.returncode == 0, r.stderr
    assert "[rank1]: rank 1 of 2 sum 3.0" in r.stdout
    ours = get_backend("kubernetes").attach("kept-ok").logs()
    for rank in range(2):
        assert f"rank {rank} of 2 sum 3.0" in ours, ours


@pytest.mark.parametrize(
    ("name", "cell"),
    [("kept-bad", "fail_on(1, 'exit')\n"), ("kept-lost", "fail_in_collective()\n")],
    ids=["rank0-busy", "rank0-in-a-collective"],
)
def test_a_failed_job_keeps_no_pod_running_and_every_ranks_log(  # type: ignore[no-untyped-def]
    k8s_shell, test_cluster, name, cell
) -> None:
    import time

    from jupyter_ktrain.pod.exits import PEER_FAILED

    assert k8s_shell.run_cell(IN_COLLECTIVE).success
    # rank 1 fails at once; rank 0 would sleep for 10 minutes, or wait in the barrier
    k8s_shell.run_cell_magic("ktrain", f"{FLAGS} --name {name}", cell)
    assert _ended(name) == "Failed"
    failed_at = time.monotonic()
    # no pod keeps running: the master is told of the worker's failure and stops itself
    phases = wait_for(
        lambda: (
            (p := _pods(test_cluster, name)) and not {"Running", "Pending"} & set(p.values()) and p
        ),
        30,
    )
    assert time.monotonic() - failed_at < 10, "the master outlived the failed job"
    master_pod, worker_pod = f"{name}-master-0", f"{name}-worker-0"
    assert sorted(phases) == [master_pod, worker_pod], phases
    # the worker's bug fails the job; the master, stopped by it, is not restarted
    assert _exit_codes(test_cluster, name) == {master_pod: PEER_FAILED, worker_pod: 1}
    logs = _sdk_logs(test_cluster, name)
    assert sorted(logs) == [master_pod, worker_pod], logs
    master, worker = logs[master_pod], logs[worker_pod]
    assert "[rank0]: rank 0 starting" in master, master
    assert "node 1 failed with exit code 1" in master, master
    assert "[rank1]: about to fail: the loader found no data" in worker, worker
    status = get_backend("kubernetes").attach(name).status()
    assert status.failed_rank == 1, status
    ours = get_backend("kubernetes").attach(name).logs()
    assert "rank 0 starting" in ours
    assert "about to fail: the loader found no data" in ours


def test_a_failed_trainjob_keeps_every_nodes_pod_and_log(k8s_shell, test_cluster) -> None:  # type: ignore[no-untyped-def]
    """A TrainJob's JobSet deletes every Job still active when it fails, and a Job that fails
    at once has its running pods deleted: node 1's bug fails only its node, node 0 is told and
    stops by itself, and the Job fails once both ended, so both pods and logs stay."""
    import time

    from jupyter_ktrain.pod.exits import PEER_FAILED

    name = "kept-tj"
    flags = f"{FLAGS} --kind TrainJob --runtime torch-distributed --name {name}"
    k8s_shell.run_cell_magic("ktrain", flags, "fail_on(1, 'exit')\n")
    assert _ended(name) == "Failed"
    failed_at = time.monotonic()

    def pods() -> dict[str, dict[str, Any]]:
        r = test_cluster.kubectl("get", "pods", "-l", f"ktrain.io/job={name}", "-o", "json")
        assert r.returncode == 0, r.stderr
        return {p["metadata"]["name"]: p for p in json.loads(r.stdout)["items"]}

    ended = wait_for(
        lambda: (
            (p := pods())
            and not {"Running", "Pending"} & {x["status"].get("phase") for x in p.values()}
            and p
        ),
        30,
    )
    assert time.monotonic() - failed_at < 10, "a node outlived the failed job"
    by_node = {
        int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): n
        for n, p in ended.items()
    }
    assert sorted(by_node) == [0, 1], sorted(ended)  # no pod deleted
    codes = {
        k: ended[n]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
        for k, n in by_node.items()
    }
    assert codes == {0: PEER_FAILED, 1: 1}, codes
    node0 = test_cluster.kubectl("logs", by_node[0])
    node1 = test_cluster.kubectl("logs", by_node[1])
    assert node0.returncode == node1.returncode == 0, node0.stderr + node1.stderr
    assert "[rank0]: rank 0 starting" in node0.stdout, node0.stdout
    assert "node 1 failed with exit code 1" in node0.stdout, node0.stdout
    assert "[rank1]: about to fail: the loader found no data" in node1.stdout, node1.stdout
    status = get_backend("kubernetes").attach(name).status()
    assert status.failed_rank == 1, status
    ours = get_backend("kubernetes").attach(name).logs()
    assert "rank 0 starting" in ours
    assert "about to fail: the loader found no data" in ours
