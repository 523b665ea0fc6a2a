"""A local job whose rank is killed mid-run restarts, resumes from its last checkpoint and
ends with the same weights as an uninterrupted run: real torchrun jobs through the
``%%ktrain`` magic, a real SIGKILL, the monitor's loss series read back as the side panel
serves it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.server.core import PanelCore

from ..resume_cells import SETUP

pytestmark = pytest.mark.slow


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    assert sh.run_cell(SETUP, store_history=True).success
    yield sh
    sh.reset(new_session=True)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_a_killed_rank_resumes_from_the_checkpoint_and_ends_as_an_uninterrupted_run(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cell = "%%ktrain --nodes 2 --procs-per-node 2 --name {}\nw, first = train(12, 3, {}, {!r})\n"
    assert shell.run_cell(cell.format("whole", None, str(tmp_path))).error_in_exec is None
    whole, _ = shell.user_ns["w"], capsys.readouterr()
    result = shell.run_cell(cell.format("resumed", 7, str(tmp_path)))
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    # killed after step 7, the last checkpoint was step 5: the run that finished began at 6
    assert shell.user_ns["first"] == 6
    assert all(torch.equal(a, b) for a, b in zip(shell.user_ns["w"], whole, strict=True))
    status = LocalBackend().status("resumed")
    assert (status.state, [r.restarts for r in status.replicas]) == ("Succeeded", [1, 1])
    assert "[ktrain] resumed from step 5 (checkpoint step-5.pt)" in out, out
    assert "resumed-node-1 restarted after exit 137" in out
    # the side panel's metrics: each step's loss once, equal to the uninterrupted run's
    core = PanelCore({"local": LocalBackend})
    panel = core.metrics("resumed")
    assert panel["notices"] == ["resumed from step 5 (checkpoint step-5.pt)"]
    [loss] = panel["panels"]
    [plain] = core.metrics("whole")["panels"]
    assert [(m["x"], m["text"]) for m in loss["markers"]] == [(5.0, "resumed from step 5")]
    assert plain["markers"] == []
    for trace, reference in zip(loss["traces"], plain["traces"], strict=True):
        assert trace["x"] == [float(s) for s in range(12)], trace["label"]
        assert trace["y"] == reference["y"], trace["label"]
    # the checkpoints: in the job's folder, the newest three kept
    folder = LocalBackend().job_dir("resumed") / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["step-11.pt", "step-5.pt", "step-8.pt"]
