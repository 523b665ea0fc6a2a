"""Real torchrun jobs on the local backend, driven through the %%ktrain magic in a real IPython
shell (get_ipython().run_cell_magic), as a user would."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.backends.local import backend as local_backend
from jupyter_ktrain.backends.local.procs import marked_pids
from jupyter_ktrain.errors import JobFailed
from tests.notebook_cells import ALLREDUCE_TRAIN, extension_shell, reported

pytestmark = pytest.mark.slow

SETUP = (
    ALLREDUCE_TRAIN
    + """
def crash_on(bad_rank):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starting", flush=True)
    if rank == bad_rank:
        print("about to fail: the loader found no data", flush=True)
        raise SystemExit(3)
    time.sleep(60)

def sleepy():
    print("sleeping", flush=True)
    time.sleep(600)
"""
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    yield from extension_shell(SETUP)


def test_two_by_two_job_all_ranks_agree_and_result_returns(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 2", "result = train(10)\n")
    out = capsys.readouterr().out
    for rank in range(4):
        assert f"[rank{rank}]: rank {rank} of 4 sum 10.0" in out
    assert job.state == "Succeeded"
    assert job.exit_codes == {0: 0, 1: 0, 2: 0, 3: 0}
    assert shell.user_ns["result"] == 100.0
    assert job.result == 100.0
    assert job.logs(rank=2).strip() == "rank 2 of 4 sum 10.0"
    assert reported(job, "allreduced") == {rank: [10.0] for rank in range(4)}  # ktrain.report
    # no pip noise: the kernel's own packages (torch 2.13.0+cu130 pinned as 2.13.0) are not
    # installed again, and nothing is said about it
    assert "torch==" in job.plan.program.files["requirements.txt"].decode()
    assert "Requirement already satisfied" not in job.logs()
    assert "requirement" not in out
    # per-rank logs are kept on disk
    job_dir = LocalBackend().job_dir(job.name)
    assert (job_dir / "rank-3.log").read_text() == "rank 3 of 4 sum 10.0\n"


def test_failing_rank_fails_the_cell_with_one_message_naming_it(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    result = shell.run_cell("%%ktrain --nodes 2 --procs-per-node 2 --name crash\ncrash_on(3)\n")
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    # the cell failed (Run All stops here) with one error, no traceback of ours
    assert isinstance(result.error_in_exec, JobFailed)
    assert out.count("JobFailed: ") == 1, out
    error = out[out.index("JobFailed: ") :]
    assert error.startswith(
        "JobFailed: rank 3 failed first (exit code 3); ranks 0, 1 and 2 were stopped\n"
    )
    assert "Traceback" not in error
    assert "about to fail: the loader found no data" in error
    status = LocalBackend().status("crash")
    assert status.state == "Failed"
    assert status.failed_rank == 3
    # every rank has its code: rank 3's own, the others' from their stopped nodes
    assert sorted(status.exit_codes) == [0, 1, 2, 3]
    assert status.exit_codes[3] == 3
    # the others were stopped, not left sleeping for 60 s
    assert time.monotonic() - started < 45
    assert not marked_pids(_marker("crash"))


def _marker(name: str) -> str:
    import json

    return str(json.loads((LocalBackend().job_dir(name) / "plan.json").read_text())["marker"])


def test_cancel_leaves_no_process_behind_and_reads_cancelled(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 2 --detach", "sleepy()\n")
    deadline = time.monotonic() + 60
    while "sleeping" not in job.logs() or job.logs().count("sleeping") < 4:
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.2)
    pids = marked_pids(_marker(job.name))
    assert len(pids) >= 2 + 2 + 4  # agents, torchruns, ranks
    shell.run_line_magic("ktrain", f"cancel {job.name}")
    status = job.status()
    assert (status.state, status.reason) == ("Cancelled", "CancelledByUser")
    # every rank has a code: its own report, or its stopped node's (143, SIGTERM)
    assert sorted(status.exit_codes) == [0, 1, 2, 3]
    assert all(code != 0 for code in status.exit_codes.values()), status.exit_codes
    assert not marked_pids(_marker(job.name))
    # torchrun's teardown traceback is one line per node
    logs = job.logs()
    assert "Traceback" not in logs, logs
    assert "SignalException" not in logs, logs
    assert logs.count("[agent]: cancelled by the user") == 2, logs
    capsys.readouterr()
    # what a user reads afterwards: status in words, and cancel again says it already ended
    shell.run_line_magic("ktrain", f"status {job.name}")
    shell.run_line_magic("ktrain", f"cancel {job.name}")
    out = capsys.readouterr().out
    assert f"{job.name} on local: Cancelled (CancelledByUser)" in out
    assert "exit codes by rank  0" in out
    assert "3: " in out.split("exit codes by rank")[1]
    assert f"{job.name}-node-1: Cancelled exit " in out
    assert "JobStatus(" not in out
    # no raw epoch time (17xxxxxxxx) before "started"; a random job name may hold "17"
    assert not re.search(r"\b1[0-9]{9}\b", out.split("started", 1)[0].replace(job.name, ""))
    assert f"{job.name!r} already ended (Cancelled); nothing to cancel." in out


def test_a_cancel_whose_job_another_command_deletes_meanwhile_ends_quietly(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``%ktrain cancel`` in one kernel waits for the job's supervisor to stop it; meanwhile
    ``%ktrain delete`` in another removes the job. The cancel ends without an error (the job is
    gone, stopped by the delete) and leaves no process behind."""
    job = shell.run_cell_magic("ktrain", "--nodes 1 --procs-per-node 2 --detach", "sleepy()\n")
    deadline = time.monotonic() + 60
    while job.logs().count("sleeping") < 2:
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.2)
    marker = _marker(job.name)
    deleted, waiting = threading.Event(), threading.Event()
    real_alive, asked = local_backend.alive, []

    def alive(raw: Any) -> bool:  # the cancel's wait (its second look), held until deleted
        if threading.current_thread().name == "cancel":
            asked.append(raw)
            if len(asked) == 2:
                waiting.set()
                deleted.wait(60)
                return True
        return real_alive(raw)

    monkeypatch.setattr(local_backend, "alive", alive)
    failed: list[BaseException] = []

    def cancel() -> None:
        try:
            LocalBackend().cancel(job.name)
        except BaseException as exc:
            failed.append(exc)

    canceller = threading.Thread(target=cancel, name="cancel")
    canceller.start()
    assert waiting.wait(30)
    while job.status().state != "Cancelled":  # the SIGTERM it sent ends the job
        assert time.monotonic() < deadline + 60
        time.sleep(0.1)
    LocalBackend().delete(job.name)  # the other command
    deleted.set()
    canceller.join(60)
    assert not canceller.is_alive()
    assert not failed, failed
    assert not marked_pids(marker)
    assert job.name not in [s.name for s in LocalBackend().list_jobs()]


def test_detached_job_is_listed_and_reattached_from_a_new_backend(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic(
        "ktrain", "--nodes 1 --procs-per-node 2 --detach", "result = train(2)\n"
    )
    fresh = LocalBackend()  # what a restarted kernel builds
    assert job.name in [s.name for s in fresh.list_jobs()]
    shell.user_ns.pop("result", None)
    again = shell.run_line_magic("ktrain", f"attach {job.name}")
    out = capsys.readouterr().out
    assert again.state == "Succeeded"
    assert "[rank1]: rank 1 of 2 sum 3.0" in out
    assert shell.user_ns["result"] == 6.0
    # the monitor shows the shape the job was started with, not 1 x 1
    assert f"[ktrain] {job.name} · PyTorchJob on local · " in out
    assert "1 node(s) × 2 proc(s)" in out, out
    # logs: a rank the job does not have is an error that says which ranks exist; an empty
    # filter says so instead of printing nothing
    result = shell.run_cell(f"%ktrain logs {job.name} --rank 9")
    err = capsys.readouterr().err
    assert isinstance(result.error_in_exec, UsageError)
    assert "has ranks 0-1; there is no rank 9" in err
    shell.run_line_magic("ktrain", f"logs {job.name} --rank 1 --grep nothing-like-this")
    assert "No line of rank 1 contains 'nothing-like-this'" in capsys.readouterr().out


def test_named_job_reruns_with_replace(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    line = "--nodes 1 --procs-per-node 2 --name again"
    assert shell.run_cell(f"%%ktrain {line}\nresult = train(1)\n").error_in_exec is None
    rerun = shell.run_cell(f"%%ktrain {line}\nresult = train(2)\n")
    err = capsys.readouterr().err
    assert isinstance(rerun.error_in_exec, UsageError)
    assert "already exists. Add --replace" in err
    assert shell.run_cell(f"%%ktrain {line} --replace\nresult = train(5)\n").error_in_exec is None
    assert "Replaced the earlier job 'again'" in capsys.readouterr().out
    assert shell.user_ns["result"] == 15.0


@pytest.mark.parametrize(
    ("line", "body", "message"),
    [
        ("--nodse 2", "train(1)", "unrecognized arguments: --nodse"),
        ("--nodes 0", "train(1)", "--nodes must be at least 1"),
        ("--name Not_DNS", "train(1)", "DNS-1035"),
        ("--nodes 2", "import socket\ns = socket.socket()\ntrain(s)", ""),
        ("", "handle = open('/dev/null')", ""),
    ],
)
def test_bad_input_one_message_and_nothing_started(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    ktrain_home: Path,
    line: str,
    body: str,
    message: str,
) -> None:
    if not message:  # unserialisable capture: the object must already be in the kernel
        setup, _, call = body.rpartition("\n")
        shell.run_cell(setup or body, store_history=True)
        body = call if setup else "handle.read()"
        message = "cannot be sent to the job"
    result = shell.run_cell(f"%%ktrain {line}\n{body}")
    err = capsys.readouterr().err
    assert isinstance(result.error_in_exec, UsageError)
    assert err.count("ktrain:") == 1, err
    assert message in err, err
    assert "Traceback" not in err
    assert not (ktrain_home / "jobs").exists() or not any((ktrain_home / "jobs").iterdir())
    shell.run_cell("for _n in ('s', 'handle'):\n    globals().get(_n) and globals()[_n].close()")


def test_dry_run_prints_every_process_launch_and_runs_nothing(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], ktrain_home: Path
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 3 --dry-run", "train(1)")
    out = capsys.readouterr().out
    assert job.dry_run
    for var in (
        "PET_NNODES=2",
        "PET_NPROC_PER_NODE=3",
        "PET_NODE_RANK=0",
        "PET_NODE_RANK=1",
        "MASTER_ADDR=127.0.0.1",
        "PET_MASTER_PORT=",
    ):
        assert var in out
    assert out.count("-m torch.distributed.run -m jupyter_ktrain.pod.runtime") == 2
    assert not (ktrain_home / "jobs").exists()


def test_flooding_ranks_lose_no_line_and_never_interleave(shell: InteractiveShell) -> None:
    """Four ranks share each node's pipe and write as fast as they can without flushing:
    every line arrives once, whole, in order per rank (pipe writes are kept atomic)."""
    body = "for i in range(3000):\n    print(f'line {i} ' + 'x' * 90)\n"
    job = shell.run_cell_magic("ktrain", "--nodes 2 --procs-per-node 2 --detach", body)
    assert job.wait(timeout=120) == "Succeeded"
    expected = [f"line {i} " + "x" * 90 for i in range(3000)]
    for rank in range(4):
        assert job.logs(rank=rank).splitlines() == expected


def test_flags_continued_over_lines_with_backslashes(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell(
        "%%ktrain --nodes 2 \\\n    --procs-per-node 3 \\\n    --dry-run\ntrain(1)"
    )
    out = capsys.readouterr().out
    assert result.error_in_exec is None
    assert "PET_NPROC_PER_NODE=3" in out
    assert result.result.plan.program.cell.strip() == "train(1)"
