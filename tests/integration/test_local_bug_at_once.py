"""A bug fails a local job at once: a 2-node x 1-process job (default options) whose rank 1
raises ``ValueError`` 3 s in, while rank 0 finishes normally, ends Failed within 2 s of the
raise, in its state and for whoever follows it (the ``%%ktrain`` cell, ``ktrain.run``); node 0,
whose rank had finished, reads as finished in the state and in every view's words (not killed,
not 137); the failure text of the cell, ``ktrain.run``, the CLI and the panel is one text, and
it carries the ``ValueError:`` line at the end of rank 1's last lines."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import JobFailed
from jupyter_ktrain.frontends.cli import main as ktrain_cli
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.server.core import PanelCore
from jupyter_ktrain.words import describe, replica_rows, status_text
from tests.notebook_cells import extension_shell

pytestmark = pytest.mark.slow

BUG = """
import os, time

def bug_in_rank_1():
    rank = int(os.environ["RANK"])
    if rank == 1:
        time.sleep(3)
        print(f"raising at {time.time():.6f}", flush=True)
        raise ValueError("bad batch 7")
    print(f"rank {rank} done", flush=True)
    return rank
"""
EXCEPTION = "ValueError: bad batch 7"
AT_ONCE_S = 2.0
KILLED = re.compile(r"SIGKILL|killed|\b(exit|code)\D{0,3}137\b")

SCRIPT = (
    BUG
    + """
import json, sys
import jupyter_ktrain as ktrain

if __name__ == "__main__":
    try:
        ktrain.run(bug_in_rank_1, backend="local", nodes=2, name=sys.argv[1])
    except ktrain.JobFailed as exc:
        print("FAILED_AT", time.time(), flush=True)
        print("FAILED", json.dumps(str(exc)), flush=True)
"""
)


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    yield from extension_shell(BUG)


def _raised_at(name: str) -> float:
    """When rank 1 raised, as it printed it."""
    logs = "\n".join(line for _, line in LocalBackend().read_logs(name))
    found = re.search(r"\[rank1\]: raising at (\d+\.\d+)", logs)
    assert found is not None, logs
    return float(found.group(1))


def _views(name: str, status: JobStatus) -> dict[str, str]:
    """What each view says of the job: ``%ktrain status`` (and ``ktrain status``), the list's
    line, the replica table, the panel's job tab."""
    detail = PanelCore({"local": LocalBackend}).job(name)
    rows = [f"{r.name} {r.phase} {r.exit_code} {r.last_event}" for r in replica_rows(status)]
    return {
        "status": status_text(status, "local"),
        "list": describe(status),
        "replicas": "\n".join(rows),
        "panel": json.dumps([detail["replicas"], detail["exit_codes"], detail["message"]]),
    }


def _the_finished_node_reads_finished(name: str) -> JobStatus:
    status = LocalBackend().status(name)
    assert status.state == "Failed"
    assert status.failed_rank == 1
    assert dict(status.exit_codes) == {0: 0, 1: 1}
    node0, node1 = status.replicas
    assert (node0.phase, node0.exit_code) == ("Succeeded", 0), node0
    assert "finished" in node0.last_event, node0
    assert node1.exit_code == 1, node1
    for view, words in _views(name, status).items():
        assert not KILLED.search(words), (view, words)
    return status


def _last_lines(text: str) -> list[str]:
    return text.split("Last lines of rank 1:\n", 1)[1].splitlines()


def test_a_bug_fails_the_cell_at_once_and_the_finished_node_reads_finished(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell("%%ktrain --nodes 2 --name bug-now\nbug_in_rank_1()\n")
    returned = time.time()
    capsys.readouterr()
    error = result.error_in_exec
    assert isinstance(error, JobFailed), result
    raised = _raised_at("bug-now")
    status = _the_finished_node_reads_finished("bug-now")
    assert status.finished is not None
    assert status.finished - raised <= AT_ONCE_S, status.finished - raised
    assert returned - raised <= AT_ONCE_S, returned - raised
    # the cell's error: the exception in its header and at the end of rank 1's last lines
    message = str(error)
    assert error.headline == f"rank 1 raised {EXCEPTION}"
    tail = _last_lines(message)
    assert f"    {EXCEPTION}" in tail, message
    assert tail.index(f"    {EXCEPTION}") > tail.index("    Traceback (most recent call last):")
    assert not KILLED.search(message), message
    # one text: the panel's failure box, and the CLI following the ended job
    assert PanelCore({"local": LocalBackend}).job("bug-now")["failure"] == message.strip()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        assert ktrain_cli(["attach", "bug-now"]) == 1
    assert f"    {EXCEPTION}" in err.getvalue(), err.getvalue()


def test_ktrain_run_raises_at_once(tmp_path: Path) -> None:
    script = tmp_path / "bug_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run(
        [sys.executable, str(script), "bug-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    at = next((x for x in out.splitlines() if x.startswith("FAILED_AT ")), None)
    assert at is not None, out + done.stderr
    raised = _raised_at("bug-run")
    assert float(at.split()[1]) - raised <= AT_ONCE_S, float(at.split()[1]) - raised
    message = json.loads(next(x for x in out.splitlines() if x.startswith("FAILED "))[7:])
    assert message.startswith(f"Job 'bug-run' failed: rank 1 raised {EXCEPTION}"), message
    assert f"    {EXCEPTION}" in _last_lines(message), message
    _the_finished_node_reads_finished("bug-run")


WARM_BUG = """
def bug_in_warm_rank_1(mark):
    rank = int(os.environ["RANK"])
    if rank == 1:
        time.sleep(3)
        open(mark, "w").write(repr(time.time()))
        raise ValueError("bad batch 7")
    time.sleep(60)  # rank 0 waits: only the bug's stop ends it
    return rank
"""


def test_a_bug_fails_a_warm_run_at_once_and_the_warm_job_takes_the_next_run(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A warm run's bug gets no grace either: the other node's rank is stopped at once."""
    assert shell.run_cell(WARM_BUG).success
    mark = tmp_path / "raised"
    warm = "%%ktrain --warm --nodes 2 --name bug-warm\n"
    try:
        result = shell.run_cell(f"{warm}bug_in_warm_rank_1({str(mark)!r})\n")
        returned = time.time()
        out = capsys.readouterr().out
        error = result.error_in_exec
        assert isinstance(error, JobFailed), out
        # rank 0 was still waiting: stopped by the failure, not an error of its own
        assert error.headline == f"rank 1 raised {EXCEPTION}; rank 0 was stopped", str(error)
        raised = float(mark.read_text())
        assert returned - raised <= AT_ONCE_S, returned - raised
        # the warm job lives on: the next run goes on the same nodes
        again = shell.run_cell(f"{warm}r = 1 + 1\n")
        assert again.error_in_exec is None, capsys.readouterr().out
        assert shell.user_ns["r"] == 2
    finally:
        with contextlib.suppress(Exception):
            LocalBackend().delete("bug-warm")
