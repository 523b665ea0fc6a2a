"""Faults on the real controllers, with default options: a bug fails the job once, at once, with
the raising rank's own exception in the cell; a deleted pod is a fault the job survives, and
the cell says which pod restarted and why. Every kind (PyTorchJob, TFJob, MPIJob, TrainJob)."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.registry import get_backend
from jupyter_ktrain.errors import JobFailed, JobNotFound

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow

BASE = "--nodes 2 --procs-per-node 1 --image local/python"
KINDS = {
    "PyTorchJob": "",
    "TFJob": "--kind TFJob",
    "MPIJob": "--kind MPIJob",
    "XGBoostJob": "--kind XGBoostJob",  # its nodes stop each other too (cleanPodPolicy None)
    "TrainJob": "--kind TrainJob --runtime torch-distributed",
}
CELLS = """
def bad_batch(bad):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} loading", flush=True)
    if rank == bad:
        raise ValueError(f"batch 3 of rank {rank} is empty")
    time.sleep(60)  # the others wait, as ranks in a collective would
"""


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(CELLS, store_history=True).success
        yield sh


def _live_pods(test_cluster, job: str) -> list[str]:
    """The job's pods that run or wait to run (``kubectl get pods``)."""
    got = test_cluster.kubectl("get", "pods", "-l", f"ktrain.io/job={job}", "-o", "json")
    pods = json.loads(got.stdout)["items"]
    live = ("Running", "Pending")
    return [p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") in live]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_bug_on_rank_1_fails_the_job_at_once_with_its_exception(
    k8s_shell, test_cluster, capsys, kind
):
    """...and leaves no pod running (rank 0's waits 60 s): the failed job's running pods are
    deleted within seconds; the job, the failed pod and every rank's log stay readable."""
    name = f"bug-{kind.lower()}"
    started = time.monotonic()
    with pytest.raises(JobFailed) as info:
        k8s_shell.run_cell_magic("ktrain", f"{KINDS[kind]} {BASE} --name {name}", "bad_batch(1)\n")
    took = time.monotonic() - started
    error = str(info.value)
    out = capsys.readouterr().out

    assert took < 30, (took, out)
    assert "rank 1" in error, error
    assert "ValueError: batch 3 of rank 1 is empty" in error, (error, out)
    status = get_backend("kubernetes").attach(name).status()
    assert status.state == "Failed", status
    assert status.restarts == 0, status.replicas  # a bug is not retried
    assert status.failed_rank == 1, status
    ended = time.monotonic()
    wait_for(lambda: not _live_pods(test_cluster, name), timeout=10, every=0.2)
    print(f"{kind}: no pod running {time.monotonic() - ended:.1f} s after the cell failed")
    assert get_backend("kubernetes").attach(name).status().state == "Failed"  # still there
    k8s_shell.run_line_magic("ktrain", f"logs {name} --rank 1")
    k8s_shell.run_line_magic("ktrain", f"logs {name} --rank 0")  # a pod deleted since, maybe
    logs = capsys.readouterr().out
    assert "ValueError: batch 3 of rank 1 is empty" in logs, logs
    if "rank 0 loading" in out:  # what the cell showed of a pod deleted since is kept
        assert "rank 0 loading" in logs, logs


def _delete_when_running(test_cluster, job_name: str, pod, marker: str) -> threading.Thread:
    """Delete ``pod`` (a name, or a function giving it then) once the job's logs show
    ``marker`` (a user's `kubectl delete pod`)."""
    backend = get_backend("kubernetes")

    def logs() -> str:
        try:
            return backend.attach(job_name).logs()
        except JobNotFound:  # not created yet
            return ""

    def run() -> None:
        wait_for(lambda: marker in logs(), timeout=90, every=0.3)
        test_cluster.faults.delete_pod(test_cluster.namespace, pod() if callable(pod) else pod)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_deleted_worker_pod_is_restarted_and_the_cell_says_so(k8s_shell, test_cluster, capsys):
    name, pod = "del-pytorchjob", "del-pytorchjob-worker-0"
    deleter = _delete_when_running(test_cluster, name, pod, "rank 1 step 3")
    job = k8s_shell.run_cell_magic("ktrain", f"{BASE} --name {name}", "result = steps(16, 0.5)\n")
    deleter.join(timeout=5)
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert f"{pod} restarted" in out, out
    assert "(restart 1 of at most 3)" in out, out
    status = job.status()
    (worker,) = [r for r in status.replicas if r.name == pod]
    assert worker.restarts >= 1
    assert k8s_shell.user_ns["result"] == 0


def test_a_deleted_tfjob_worker_fails_the_job_as_the_operator_decides_and_the_cell_says_why(
    k8s_shell, test_cluster
):
    """The Training Operator v1.9's TFJob controller fails a TFJob whose worker pod fails while
    its chief runs, ExitCode or not (it only keeps a Restarting condition it set in the same
    pass, and a deleted pod is not restarted there): the real controller decides, and the
    cell says which pod ended and how."""
    name, pod = "del-tfjob", "del-tfjob-worker-0"
    deleter = _delete_when_running(test_cluster, name, pod, "rank 1 step 3")
    with pytest.raises(JobFailed) as info:
        k8s_shell.run_cell_magic(
            "ktrain", f"{KINDS['TFJob']} {BASE} --name {name}", "result = steps(16, 0.5)\n"
        )
    deleter.join(timeout=5)
    text = str(info.value)
    assert "1 Worker replica(s) failed" in text, text
    assert f"{pod} ended with exit 143, killed by signal 15 (SIGTERM)" in text, text
    assert "its pod deleted, preempted or evicted" in text, text


def test_a_deleted_trainjob_pod_restarts_the_jobset_and_the_cell_says_so(
    k8s_shell, test_cluster, capsys
):
    """Its own TrainingRuntime (the cluster one plus the failure policy): a deleted pod is a
    fault, so JobSet restarts every Job (new pods, all ranks rejoin), and the job succeeds."""
    import json

    name = "del-trainjob"

    def victim() -> str:
        pods = json.loads(
            test_cluster.kubectl("get", "pods", "-l", f"ktrain.io/job={name}", "-o", "json").stdout
        )["items"]
        return next(
            (p["metadata"]["name"] for p in pods if "-node-0-1-" in p["metadata"]["name"]), ""
        )

    deleter = _delete_when_running(test_cluster, name, victim, "rank 1 step 3")
    job = k8s_shell.run_cell_magic(
        "ktrain", f"{KINDS['TrainJob']} {BASE} --name {name}", "result = steps(10, 0.5)\n"
    )
    deleter.join(timeout=5)
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "restarted with every other pod by its JobSet (attempt 1)" in out, out
    assert "(restart 1 of at most 3)" in out, out
    runtime = test_cluster.kubectl("get", "trainingruntime", name, "-o", "json")
    assert (
        json.loads(runtime.stdout)["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 3
    )


@pytest.mark.parametrize("fault", ["kill", "delete"])
def test_a_lost_mpi_rank_reruns_mpirun_and_the_cell_says_so(
    k8s_shell, test_cluster, tmp_path, capsys, fault
):
    """Rank 1 killed by SIGKILL (the OOM killer's way) the first time, or its worker pod
    deleted: mpirun fails with no bug reported, so the launcher's agent runs it again once the
    workers run; the job succeeds and the cell says why."""
    name = f"{fault}-mpijob"
    marker = tmp_path / "killed-once"  # the pods' processes run on this machine
    cell = "result = steps(10, 0.5)\n"
    if fault == "kill":
        cell = (
            "import signal\n"
            f"if int(os.environ['RANK']) == 1 and not os.path.exists({str(marker)!r}):\n"
            f"    open({str(marker)!r}, 'w').close()\n"
            "    time.sleep(1)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
        ) + cell
    if fault == "delete":
        _delete_when_running(test_cluster, name, f"{name}-worker-1", "rank 1 step 3")
    job = k8s_shell.run_cell_magic("ktrain", f"{KINDS['MPIJob']} {BASE} --name {name}", cell)
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "the launcher started the ranks again" in out, out
    assert "(restart 1 of at most 3)" in out, out


def test_a_rank_killed_by_sigkill_restarts_its_pod_and_the_cell_says_so(
    k8s_shell, tmp_path, capsys
):
    """kill -9 of one rank (as the OOM killer does) the first time: its pod exits 137, the
    operator's ExitCode policy makes it anew, and the job finishes."""
    marker = tmp_path / "killed-once"  # the pods' processes run on this machine
    cell = (
        "import signal\n"
        f"if int(os.environ['RANK']) == 1 and not os.path.exists({str(marker)!r}):\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "del signal\n"
        "result = steps(12, 0.5)\n"  # rank 0 runs on while rank 1's pod is made anew
    )
    job = k8s_shell.run_cell_magic("ktrain", f"{BASE} --name kill-rank", cell)
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "rank 1 was killed" in out, out
    assert "kill-rank-worker-0 restarted after exit 137, killed by signal 9 (SIGKILL)" in out, out
    assert "(restart 1 of at most 3)" in out, out


def test_trainjob_streams_every_ranks_logs_into_the_cell(k8s_shell, capsys):
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"{KINDS['TrainJob']} {BASE} --name tj-logs",
        "result = steps(3, 0.2)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for rank in (0, 1):
        for i in range(3):
            assert f"[rank{rank}]: rank {rank} step {i}" in out, out
