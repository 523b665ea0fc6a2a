"""Progress of a hand-written loop (``ktrain.report(step=i, total=n)``) in a real local job:
the same percent and ETA in ``Job.status``, ``%ktrain list``, the monitor model (header) and the
side panel's API, while it runs and at the end."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.monitor.live import model_from_logs
from jupyter_ktrain.monitor.text import header_text
from jupyter_ktrain.server.core import PanelCore
from tests.notebook_cells import PACED_LOOP, extension_shell

pytestmark = pytest.mark.slow


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    yield from extension_shell(PACED_LOOP)


def test_a_hand_written_loop_shows_progress_everywhere(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    job = shell.run_cell_magic("ktrain", "--nodes 2 --detach", "steps = paced(40, 0.15)\n")
    seen = []
    deadline = time.monotonic() + 120
    while not job.status().terminal:
        assert time.monotonic() < deadline, job.logs()
        p = job.status().progress
        if p is not None:
            seen.append(p)
        time.sleep(0.2)
    running = [p for p in seen if p.percent is not None and p.percent < 100]
    assert running, seen  # seen while it ran, not only at the end
    assert running[0].eta_s is None or running[0].step > 2  # unknown until a few steps
    timed = [p for p in running if p.eta_s is not None]
    assert timed, running
    # the ETA agrees with the steps left at the measured pace (0.15 s a step, loosely)
    assert all(0 < p.eta_s <= (40 - p.step) * 1.0 for p in timed if p.eta_s), timed

    status = job.status()
    assert status.state == "Succeeded"
    assert status.progress is not None
    assert (status.progress.step, status.progress.total, status.progress.percent) == (40, 40, 100)
    assert repr(job).endswith("Succeeded · 100% (40/40) · AllRanksSucceeded>")

    capsys.readouterr()
    shell.run_line_magic("ktrain", "list")
    (listed,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(job.name)]
    assert "Succeeded · 100% (40/40)" in listed

    model = model_from_logs(job.name, LocalBackend().read_logs(job.name))
    assert model.progress is not None
    assert (model.progress.step, model.progress.total) == (40, 40)
    model.set_state("Succeeded", time.time())
    assert "100% (40/40)" in header_text(model, time.time())

    row = next(
        j for j in PanelCore({"local": LocalBackend}).jobs()["jobs"] if j["name"] == job.name
    )
    assert row["progress"] is not None
    assert (row["progress"]["percent"], row["progress"]["eta_s"]) == (100.0, None)
    assert row["progress"]["text"] == "100% (40/40)"
