"""Failing ranks on the test cluster (exit 1, OOM-killed, NCCL-timeout-like output): the job is
Failed, the first failing rank and its class come first; and log fidelity under faults."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.monitor.follow_loop import follow

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow
FLAGS = "--nodes 2 --procs-per-node 2 --image local/python --restart-policy Never"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _summary(out: str) -> str:
    return out[out.index("failed") :] if "failed" in out else out


def _failed_cell(shell, flags: str, cell: str):  # type: ignore[no-untyped-def]
    """A failed job fails its cell (one JobFailed naming the first failing rank); the job
    itself is still there to inspect."""
    from jupyter_ktrain.backends.registry import get_backend
    from jupyter_ktrain.errors import JobFailed

    with pytest.raises(JobFailed) as info:
        shell.run_cell_magic("ktrain", flags, cell)
    name = flags.split("--name ")[1].split()[0]
    assert f"Job {name!r} failed" in str(info.value)
    return get_backend("kubernetes").attach(name), str(info.value)


def test_exit_1_on_rank_3(k8s_shell, capsys):
    job, error = _failed_cell(k8s_shell, f"{FLAGS} --name bad-exit", "fail_on(3, 'exit')\n")
    out = capsys.readouterr().out + error
    status = job.status()
    assert status.state == "Failed", out
    assert status.failed_rank == 3
    assert status.exit_codes[3] == 1
    assert "rank 3 failed first (exit code 1)" in out
    tail = out.split("Last lines of rank 3:")[1]
    assert "about to fail: the loader found no data" in tail


def test_nccl_timeout_classified(k8s_shell, test_cluster, capsys):
    job, error = _failed_cell(k8s_shell, f"{FLAGS} --name bad-nccl", "fail_on(1, 'nccl')\n")
    out = capsys.readouterr().out + error
    status = job.status()
    assert status.state == "Failed", out
    log = test_cluster.kubectl("logs", "bad-nccl-master-0", "--timestamps").stdout
    assert status.failed_rank == 1, (status, log[-3000:])
    assert status.reason == "NCCL timeout"
    assert status.message.startswith("rank 1 (bad-nccl-master-0) failed first")
    assert "rank 1 failed first (exit code 6, NCCL timeout)" in out
    assert "(NCCL timeout: " in out  # the class, shown with the failing rank first


def test_oom_killed_pod(k8s_shell, test_cluster, capsys):
    job = k8s_shell.run_cell_magic(
        "ktrain", f"{FLAGS} --name bad-oom --detach", "fail_on(2, 'oom')\n"
    )
    ns = test_cluster.namespace
    wait_for(lambda: "allocating" in job.logs(rank=2), timeout=60, every=0.3)
    test_cluster.faults.oom_kill(ns, "bad-oom-worker-0")
    assert job.wait(timeout=60) == "Failed"
    status = job.status()
    assert status.failed_rank == 2
    assert status.reason == "OOM"
    worker = next(r for r in status.replicas if r.name == "bad-oom-worker-0")
    assert worker.exit_code == 137
    assert "OOMKilled" in worker.last_event


class _Collect:
    def __init__(self) -> None:
        self.by_rank: dict[int, list[str]] = {}
        self.states: list[str] = []

    def lines(self, replica, lines):
        for line in lines:
            if line.rank is not None and line.record is None:
                self.by_rank.setdefault(line.rank, []).append(line.text)

    def status(self, status):
        self.states.append(status.state)


def test_every_line_once_in_order_under_cuts_restart_and_500s(k8s_shell, test_cluster):
    n = 400
    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 2 --procs-per-node 2 --image local/python --name fidelity --detach",
        f"numbered({n}, 0.01)\n",
    )
    sink = _Collect()
    result: dict[str, object] = {}
    t = threading.Thread(target=lambda: result.update(final=follow(job, sink)), daemon=True)
    t.start()
    ns = test_cluster.namespace
    wait_for(lambda: len(sink.by_rank.get(0, [])) > 20, timeout=90, every=0.05)
    faults = test_cluster.faults
    faults.fail_next(3, 500, path="/log")
    faults.cut_logs(ns)
    wait_for(lambda: len(sink.by_rank.get(2, [])) > 60, timeout=60, every=0.05)
    faults.fail_next(2, 500, path="/pods")
    faults.cut_logs(ns, "fidelity-master-0")
    faults.drop_watches()
    faults.cut_logs(ns)
    wait_for(lambda: len(sink.by_rank.get(0, [])) > 200, timeout=60, every=0.05)
    faults.fail_next(2, 429, path="/log", retry_after=1)
    faults.cut_logs(ns)
    t.join(120)
    assert not t.is_alive()
    assert result["final"].state == "Succeeded", sink.states
    want = [f"line {i}" for i in range(n)]
    for rank in range(4):
        assert sink.by_rank[rank] == want, (rank, len(sink.by_rank[rank]))


def test_restarted_container_keeps_previous_lines(k8s_shell, test_cluster):
    n = 200
    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 1 --procs-per-node 2 --image local/python --name restarts --detach",
        f"numbered({n}, 0.01)\n",
    )
    sink = _Collect()
    result: dict[str, object] = {}
    t = threading.Thread(target=lambda: result.update(final=follow(job, sink)), daemon=True)
    t.start()
    wait_for(lambda: len(sink.by_rank.get(1, [])) > 30, timeout=90, every=0.05)
    test_cluster.faults.restart_container(test_cluster.namespace, "restarts-master-0")
    t.join(120)
    assert not t.is_alive()
    assert result["final"].state == "Succeeded", sink.states
    stored = {
        flag: test_cluster.kubectl("logs", "restarts-master-0", *([flag] if flag else [])).stdout
        for flag in ("--previous", "")
    }
    for rank in range(2):
        truth = [
            line.split(": ", 1)[1]
            for text in (stored["--previous"], stored[""])
            for line in text.splitlines()
            if line.startswith(f"[rank{rank}]: line ")
        ]
        assert truth[-n:] == [f"line {i}" for i in range(n)]
        assert len(truth) > n  # the first run's lines, then the second run's
        assert sink.by_rank[rank] == truth
