"""What a failed ``%%ktrain`` cell shows: one error whose header says what happened, the first
failing rank's own last lines down to its exception line; and torchrun's own reports folded
to one line in the monitor (recorded logs of a real 2 x 2 local job whose rank 1 raised)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.errors import JobCancelled, JobFailed, SpecError
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.monitor.cell_error import exception_line, failure_headline, job_error
from jupyter_ktrain.monitor.torchrun import (
    TorchrunFold,
    child_failed_line,
    lost_peer_line,
    teardown_line,
)
from jupyter_ktrain.pod.protocol import LogLine, parse_line

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _node_log(node: int) -> list[LogLine]:
    text = (LOGS / f"torchrun_rank1_raised_node{node}.log").read_text()
    return [parse_line(line) for line in text.splitlines()]


def _rank_lines(lines: list[LogLine], rank: int) -> list[str]:
    return [x.text for x in lines if x.rank == rank and x.record is None]


class _Job:
    """What job_error reads of a job: its name and one rank's stored lines."""

    def __init__(self, name: str, logs: dict[int, list[str]]):
        self.name = name
        self._logs = logs

    def logs(self, rank: int | None = None, grep: str | None = None) -> str:
        lines = self._logs.get(rank if rank is not None else -1, [])
        return "".join(f"{line}\n" for line in lines)


def _failed(rank: int, codes: dict[int, int], message: str = "") -> JobStatus:
    return JobStatus(
        name="loader", state="Failed", reason="RankFailed", message=message,
        exit_codes=codes, failed_rank=rank,
    )  # fmt: skip


# -- the monitor: torchrun's reports folded --------------------------------------------------
def test_child_failed_banner_is_one_line_and_every_rank_line_stays() -> None:
    lines = _node_log(0)
    shown = TorchrunFold("loader").feed(lines)
    texts = [x.text for x in shown]
    assert texts.count(child_failed_line("loader")) == 1
    joined = "\n".join(texts)
    for gone in ("Root Cause", "ChildFailedError", "torch/distributed/run.py", "exitcode  :"):
        assert gone not in joined
    assert [x for x in shown if x.source != "node"] == [x for x in lines if x.source != "node"]
    # torchrun's one-line log messages (which process it stopped, which failed) stay, worded:
    # no logger prefix, no absolute path of the environment's Python
    assert "torchrun: local rank 1 (pid 17788) failed with exit code 1" in texts
    assert "torchrun: stopping process 17787 (SIGTERM)" in texts
    assert not [t for t in texts if "of binary" in t or "/.venv/" in t or "api.py:" in t], texts


def test_a_stopped_torchrun_is_one_line() -> None:
    shown = [x.text for x in TorchrunFold("loader").feed(_node_log(1))]
    assert "torchrun: stopped by signal 15" in shown
    assert not any("SignalException" in t or "Traceback" in t for t in shown)


def test_any_other_node_traceback_passes_whole_even_in_pieces() -> None:
    crash = [
        "Traceback (most recent call last):",
        '  File "/usr/bin/torchrun", line 5, in <module>',
        "    from torch.distributed.run import main",
        "ModuleNotFoundError: No module named 'torch'",
        "after it",
    ]
    fold = TorchrunFold("x")
    lines = [parse_line(t) for t in crash]
    first = fold.feed(lines[:2])  # held until its exception line says whose it is
    assert first == []
    assert [x.text for x in fold.feed(lines[2:])] == crash
    assert fold.feed([parse_line("Traceback (most recent call last):")]) == []
    assert [x.text for x in fold.flush()] == ["Traceback (most recent call last):"]


def test_torchruns_teardown_noise_after_a_good_end_is_one_line_that_says_it_is_harmless() -> None:
    """A node whose torchrun lost the rendezvous store at the end of a job that succeeded:
    c10d's warning and C++ stack (``frame #5: c10d::TCPStore::doWait``), then "Error waiting on
    exit barrier" with its DistNetworkError: one line, which says it is harmless."""
    text = (LOGS / "torchrun_exit_barrier_node1.log").read_text()
    lines = [parse_line(line) for line in text.splitlines()]
    fold = TorchrunFold("ddp")
    shown = fold.feed(lines)
    assert not fold.idle  # the block may go on: held until a line after it, or the end
    shown += fold.flush()
    assert fold.idle
    assert [x.text for x in shown] == ["hello from 1 of 2", teardown_line("ddp", barrier=True)]
    assert "harmless" in teardown_line("ddp", barrier=True)
    # the C++ warning and stack alone (a node that lost the store mid-run), then a plain line
    stack = [x for x in lines if "exit barrier" not in x.text and not x.text.startswith("E11")]
    after = parse_line("torchrun: restarting")
    shown = TorchrunFold("ddp").feed([*stack[1:], after])
    assert [x.text for x in shown] == [teardown_line("ddp", barrier=False), after.text]
    assert "harmless" in shown[0].text


# -- the cell's error ---------------------------------------------------------------------------
def test_rank_that_raised_heads_the_error_with_its_own_traceback() -> None:
    node0 = _node_log(0)
    job = _Job("loader", {1: _rank_lines(node0, 1)})
    error = job_error(job, _failed(1, {0: 1, 1: 1, 2: 1, 3: 1}))  # type: ignore[arg-type]
    assert type(error) is JobFailed
    headline = (
        "rank 1 raised ValueError: no shard 1 in /data; ranks 0, 2 and 3 ended with an error too"
    )
    assert error.headline == headline
    assert str(error).startswith("Job 'loader' failed: rank 1 raised ValueError")
    shown = ANSI.sub("", "\n".join(error.render()))
    assert shown.splitlines()[0] == f"JobFailed: {headline}"
    # the header, the line that raised it, and the traceback's own end (as the panel shows it)
    assert shown.count("no shard 1 in /data") == 3
    assert "    ValueError: no shard 1 in /data" in shown.split("Last lines of rank 1:")[1]
    assert 'File "cell [1]", line 7, in load' in shown
    assert "no shard for this rank in /data" in shown  # what it printed comes with it
    assert "%ktrain logs loader --rank 1" in shown


def test_rank_that_exited_without_a_traceback_says_its_code_and_kind() -> None:
    lines = ["step 3", "CUDA out of memory. Tried to allocate 2.00 GiB"]
    error = job_error(_Job("big", {2: lines}), _failed(2, {2: 3}))  # type: ignore[arg-type]
    assert error.headline == "rank 2 failed first (exit code 3, OOM)"
    shown = "\n".join(error.render())
    assert "OOM: out of memory" in shown  # and what to do
    assert "    CUDA out of memory. Tried to allocate 2.00 GiB" in shown


def test_a_handled_traceback_is_not_what_ended_the_rank() -> None:
    lines = ["Traceback (most recent call last):", '  File "x.py", line 1', "KeyError: 'a'"]
    error = job_error(_Job("j", {0: [*lines, "giving up"]}), _failed(0, {0: 3}))  # type: ignore[arg-type]
    assert error.headline == "rank 0 failed first (exit code 3)"
    assert "KeyError: 'a'" in str(error)  # still among its last lines


def test_last_traceback_wins_and_frames_are_not_the_exception() -> None:
    lines = [
        "Traceback (most recent call last):",
        '  File "cell [2]", line 3, in f',
        "KeyError: 'a'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "cell [2]", line 5, in f',
        "    raise ValueError(x)",
        "        ^^^^^^^^^^^^^^^",
        "ValueError: bad",
        "more output",
    ]
    assert exception_line(lines) == 10
    assert exception_line(["no traceback here"]) is None


def test_a_printed_line_that_lands_inside_the_traceback_is_not_the_exception() -> None:
    """stdout and stderr reach a rank's log apart: ``rank 3 up`` (printed before it raised)
    arrived after the traceback's first line, as seen in a pod's log."""
    lines = [
        "Traceback (most recent call last):",
        "rank 3 up",
        '  File "cell [4]", line 1, in <module>',
        "    fail_or_hang()",
        '    raise ValueError("no shard for rank 3")',
        "ValueError: no shard for rank 3",
    ]
    assert exception_line(lines) == 5
    assert failure_headline(3, 1, lines) == "rank 3 raised ValueError: no shard for rank 3"
    bare = ["Traceback (most recent call last):", '  File "x", line 1', "KeyboardInterrupt"]
    assert exception_line(bare) == 2


def test_cancelled_and_failed_before_any_rank() -> None:
    job: Any = _Job("bg", {})
    cancelled = job_error(job, JobStatus(name="bg", state="Cancelled"))
    assert isinstance(cancelled, JobCancelled)
    assert ANSI.sub("", cancelled.render()[0]) == (
        "JobCancelled: 'bg' was cancelled by the user; the cell set no names."
    )
    lost = job_error(job, JobStatus(name="bg", state="Failed", reason="Lost", message="gone"))
    assert lost.headline == "'bg' failed: gone"  # what the backend knows, first
    bare = job_error(job, JobStatus(name="bg", state="Failed", reason="Lost"))
    assert bare.headline == "'bg' failed before any rank reported (Lost)"


# -- as IPython shows it --------------------------------------------------------------------------
def test_ipython_shows_our_lines_not_a_traceback_nor_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sh = InteractiveShell.instance()
    sh.user_ns["error"] = JobFailed(
        "Job 'x' failed: rank 1 raised E: e\n    tail", headline="rank 1 raised E: e"
    )
    sh.user_ns["bad_input"] = SpecError("--nodes must be at least 1.")
    result = sh.run_cell("raise error")
    shown = ANSI.sub("", capsys.readouterr().out)
    assert isinstance(result.error_in_exec, JobFailed)
    assert shown.splitlines() == ["JobFailed: rank 1 raised E: e", "    tail"]
    sh.run_cell("raise bad_input")
    assert ANSI.sub("", capsys.readouterr().out).strip() == "SpecError: --nodes must be at least 1."


# -- the monitor: a rank that only lost a peer ---------------------------------------------------
def test_a_lost_peers_traceback_is_one_line_per_rank_and_the_rest_stays() -> None:
    """Node 0 of a job whose node 1 was killed: each of its ranks printed gloo's traceback of
    the broken connection and exited 143. Each becomes one line; every other line, and the
    exit records, come through."""
    lines = [parse_line(t) for t in (LOGS / "gloo_peer_lost_node0.log").read_text().splitlines()]
    shown = TorchrunFold("demo").feed(lines)
    texts = [x.text for x in shown if x.rank is not None and x.record is None]
    for rank in (0, 1):
        said = lost_peer_line("demo", rank, [])
        assert said.startswith("lost its peer (another rank or node ended)")
        one = (
            f"lost its peer (gloo: Connection reset by peer); its traceback: %ktrain logs demo "
            f"--rank {rank}"
        )
        assert [x.text for x in shown if x.rank == rank].count(one) == 1
    joined = "\n".join(texts)
    for gone in ("GLHF", "Traceback", "loss.backward()", "pair.cc"):
        assert gone not in joined, gone
    assert "rank 0 trains steps 0-23" in texts

    def passing(xs: list[LogLine]) -> list[LogLine]:
        return [x for x in xs if x.record is not None or x.source == "agent"]

    assert passing(shown) == passing(lines)  # the exit records too, in order


def test_a_traceback_that_is_not_a_lost_peer_or_was_handled_comes_whole() -> None:
    raised = [
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "cell [2]", line 3, in f',
        "[rank1]: RuntimeError: Connection reset by peer",
        '[rank1]: @@ktrain {"type":"exit","rank":1,"code":1}',
    ]
    fold = TorchrunFold("x")
    shown = fold.feed([parse_line(t) for t in raised])
    assert [x.text for x in shown[:3]] == [t.split(": ", 1)[1] for t in raised[:3]]
    handled = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "cell [2]", line 3, in f',
        "[rank0]: KeyError: 'a'",
        "[rank0]: carrying on",
    ]
    first = fold.feed([parse_line(t) for t in handled[:3]])
    assert first == []  # held until the next line says whether the rank went on
    assert [x.text for x in fold.feed([parse_line(handled[3])])] == [
        t.split(": ", 1)[1] for t in handled
    ]
    fold.feed([parse_line("[rank0]: Traceback (most recent call last):")])
    assert [x.text for x in fold.flush()] == ["Traceback (most recent call last):"]
