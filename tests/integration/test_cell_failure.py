"""A followed job that fails fails its cell, in a real kernel run headless by nbclient (what
Run All, papermill and CI do): execution stops there with one error naming the first failing
rank and its last lines; the next cell never runs. ``--detach`` does not raise."""

from __future__ import annotations

import os
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


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "ktrain-home"
    monkeypatch.setenv("KTRAIN_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("KTRAIN_MONITOR", raising=False)
    return home


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
        "%%ktrain --nodes 1 --procs-per-node 2 --name loader\nload(1)",
        'print("NEXT CELL RAN")',
    )
    with pytest.raises(CellExecutionError) as caught:
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    message = str(caught.value)
    assert "Job 'loader' failed: rank 1 exited first with code 1" in message
    assert "no shard for this rank in /data" in message  # its last lines come with it
    errors = [o for o in nb.cells[2].outputs if o.get("output_type") == "error"]
    streams = "".join(o.get("text", "") for o in nb.cells[2].outputs if o.get("name") == "stderr")
    assert len(errors) + streams.count("Job 'loader' failed") == 1, nb.cells[2].outputs
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
