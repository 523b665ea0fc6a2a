"""The same RayJob cell on the local backend: the driver runs once, ray.init() starts Ray on
this machine, its tasks' lines and reports reach the cell, the result comes back."""

from __future__ import annotations

import pytest

pytest.importorskip("ray")

from jupyter_ktrain.errors import JobFailed
from tests.notebook_cells import RAY_CELL, extension_shell, reported

pytestmark = pytest.mark.slow


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path / "home"))
    yield from extension_shell(RAY_CELL)


def test_a_rayjob_cell_runs_locally_with_a_local_ray(shell, capsys):
    job = shell.run_cell_magic(
        "ktrain", "--kind RayJob --nodes 3 --name ray", "hosts = spread(3)\n"
    )
    out = capsys.readouterr().out

    assert job.state == "Succeeded", out
    assert "the RayJob's driver runs once here" in out, out
    assert len(shell.user_ns["hosts"]) == 3, out  # the driver's result, in the notebook
    for i in range(3):
        assert f"task {i} on " in out, out  # each task's line, forwarded by Ray to the driver
    values = sorted(v for vs in reported(job, "task").values() for v in vs)
    assert values == [0.0, 1.0, 2.0], (values, out)


def test_a_ray_task_that_raises_fails_the_local_cell_with_its_traceback(shell, capsys):
    with pytest.raises(JobFailed) as info:
        shell.run_cell_magic("ktrain", "--kind RayJob --name ray-bad", "failing()\n")
    error, out = str(info.value), capsys.readouterr().out
    assert "RayTaskError(ValueError)" in error, (error, out)
    assert "ValueError: shard 3 is empty" in error, (error, out)
