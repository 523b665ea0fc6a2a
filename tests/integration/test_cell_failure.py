"""A followed job that fails fails its cell, in a real kernel run headless by nbclient (what
Run All, papermill and CI do): execution stops there with one error naming the first failing
rank and its last lines; the next cell never runs. ``--detach`` does not raise.

The error is what JupyterLab shows (the notebook's error output): ``JobFailed: rank 1 raised
...`` as its header, rank 1's own traceback (frames named by cell) down to its exception line,
nothing of torchrun's ChildFailedError report, no "UsageError" label."""

from __future__ import annotations

import os
import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_ktrain.backends.local import LocalBackend

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

FAIL = """import os, time

def load(bad_rank):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} loading", flush=True)
    if rank == bad_rank:
        print("no shard for this rank in /data", flush=True)
        raise FileNotFoundError("/data/shard-1")
    time.sleep(30)
"""

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "ktrain-home"
    monkeypatch.setenv("KTRAIN_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("KTRAIN_MONITOR", raising=False)
    return home


def _widget_html(nb: nbformat.NotebookNode) -> list[str]:
    """The values of the executed notebook's HTML widgets (the monitor's header, log pane)."""
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [
        str(s["state"].get("value", "")) for s in state.values() if s["model_name"] == "HTMLModel"
    ]


def _notebook(*cells: str) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def test_failed_job_stops_run_all_with_one_error(kernel_env: Path) -> None:
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = _notebook(
        "%load_ext jupyter_ktrain",
        FAIL,
        "%%ktrain --nodes 2 --procs-per-node 2 --name loader\nload(1)",
        'print("NEXT CELL RAN")',
    )
    client = NotebookClient(nb, timeout=120, kernel_name="python3")
    with pytest.raises(CellExecutionError) as caught:
        client.execute()
    client.set_widgets_metadata()  # what the page showed (kept on success only by default)
    assert caught.value.ename == "JobFailed"
    errors = [o for o in nb.cells[2].outputs if o.get("output_type") == "error"]
    assert len(errors) == 1, nb.cells[2].outputs
    error = errors[0]
    assert error.ename == "JobFailed"
    assert error.evalue.startswith("Job 'loader' failed: rank 1 raised FileNotFoundError")
    shown = ANSI.sub("", "\n".join(error.traceback))  # what JupyterLab renders
    lines = shown.splitlines()
    # the one headline the cell, the widget and the panel say; the ranks stopped after rank 1
    # failed read as stopped (a signal's code), not as errors of their own
    assert lines[0] == (
        "JobFailed: rank 1 raised FileNotFoundError: /data/shard-1; ranks 0, 2 and 3 were stopped"
    )
    # the header, the line that raised it, and the traceback's own end (as the panel shows it)
    assert shown.count("/data/shard-1") == 3
    assert "    FileNotFoundError: /data/shard-1" in shown.split("Last lines of rank 1:")[1]
    assert 'raise FileNotFoundError("/data/shard-1")' in shown
    # rank 1's own traceback, its frames named by notebook cell, and what it printed
    assert re.search(r'File "cell \[\d+\]", line 8, in load', shown), shown
    assert "no shard for this rank in /data" in shown
    assert "%ktrain logs loader --rank 1" in shown
    for noise in ("Root Cause", "ChildFailedError", "UsageError", "torch/distributed", "rank 2"):
        assert noise not in shown, shown
    streams = "".join(o.get("text", "") for o in nb.cells[2].outputs if o.get("name") == "stderr")
    assert "raised FileNotFoundError" not in streams  # said once: in the error, not again
    # the monitor above it: the header names the first failing rank (not "RankFailed"), and
    # the log pane has torchrun's report folded to one line
    html = _widget_html(nb)
    header = next(v for v in html if "●" in v)
    assert "loader · PyTorchJob on local · Failed" in header
    assert "rank 1 failed first (exit code 1)" in header, header
    assert "RankFailed" not in header
    pane = "\n".join(v for v in html if v.startswith("<pre"))
    assert "FileNotFoundError: /data/shard-1" in pane  # rank 1's lines are all there
    assert "torchrun: processes on this node ended with an error" in pane
    assert "Root Cause" not in pane
    assert "ChildFailedError" not in pane
    assert nb.cells[3].outputs == []  # Run All stopped at the failed cell
    assert LocalBackend(kernel_env).status("loader").state == "Failed"


def test_detached_job_does_not_fail_its_cell(kernel_env: Path) -> None:
    from nbclient import NotebookClient

    nb = _notebook(
        "%load_ext jupyter_ktrain",
        FAIL,
        "%%ktrain --nodes 1 --procs-per-node 2 --name bg --detach\nload(0)",
        'print("NEXT CELL RAN")',
    )
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
        assert "NEXT CELL RAN" in nb.cells[3].outputs[0]["text"]
    finally:
        backend = LocalBackend(kernel_env)
        backend.cancel("bg")
