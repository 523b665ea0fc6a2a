"""``%ktrain compare``: two real local jobs that differ in one constant and one flag, their
loss overlaid and what differed listed (the jobs' records in the job store), and ``%ktrain
delete`` saying what it removed where."""

from __future__ import annotations

import re

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.runner.compare import comparison
from jupyter_ktrain.server.core import PanelCore
from jupyter_ktrain.tracking import side_by_side

pytestmark = pytest.mark.slow

TRAIN = """
import jupyter_ktrain as ktrain

def train(steps):
    for step in range(steps):
        ktrain.report(step=step, loss=LR * (steps - step))
"""


def test_two_jobs_compared_on_their_loss_with_what_differed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    shell.extension_manager.load_extension("jupyter_ktrain")
    for name, lr, env in (("cmp-a", 0.1, "A=1"), ("cmp-b", 0.2, "A=2")):
        assert shell.run_cell(f"LR = {lr}\n" + TRAIN, store_history=True).success
        cell = f"%%ktrain --name {name} --env {env} --mlflow off\ntrain(20)\n"
        assert shell.run_cell(cell).error_in_exec is None
    capsys.readouterr()
    assert shell.run_cell("%ktrain compare cmp-a cmp-b").success
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
    assert rows["loss"][-2:] == ["0.1", "0.2"], out  # "loss (last)": LR * 1
    assert rows["const.LR"] == ["0.1", "0.2"], out
    assert "'1']]" in rows["env"][1], out  # --env A=1 against --env A=2
    assert "'2']]" in rows["env"][3], out
    assert "nodes" not in rows  # the same in both: not listed
    c = comparison(LocalBackend(), ["cmp-a", "cmp-b"])
    assert c.curves["cmp-a"][0] == [float(s) for s in range(20)]
    assert c.curves["cmp-b"][1][0] == pytest.approx(4.0)
    fig = side_by_side.figure(c)
    assert [t.type for t in fig.data] == ["scatter", "scatter", "table"]
    # delete says what it removed where
    assert shell.run_cell("%ktrain delete cmp-a").success
    out = capsys.readouterr().out
    assert "Deleted 'cmp-a'. Removed its record (params, tracking state) from " in out, out
    assert "history/local/cmp-a" in out
    shell.reset(new_session=True)


def test_two_runs_of_a_warm_job_compared_as_name_colon_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``%ktrain compare NAME:1 NAME:2``: two cells run on one warm job, each run its own
    column, with the constant that changed between them; a run that is not there, or a run
    number that is not one, is one error before anything is read."""
    shell = InteractiveShell.instance()
    shell.reset(new_session=True)
    shell.extension_manager.load_extension("jupyter_ktrain")
    try:
        for lr in (0.1, 0.3):
            assert shell.run_cell(f"LR = {lr}\n" + TRAIN, store_history=True).success
            cell = "%%ktrain --warm --nodes 1 --procs-per-node 1 --name cmp-w --mlflow off\n"
            assert shell.run_cell(cell + "train(10)\n").error_in_exec is None
        capsys.readouterr()
        assert shell.run_cell("%ktrain compare cmp-w:1 cmp-w:2").success
        out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
        rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip()}
        assert rows["cmp-w:1"] == ["cmp-w:2"], out  # the columns: one per run
        assert rows["loss"][-2:] == ["0.1", "0.3"], out  # "loss (last)": LR * 1
        assert rows["const.LR"] == ["0.1", "0.3"], out
        c = comparison(LocalBackend(), ["cmp-w:1", "cmp-w:2"])
        assert c.curves["cmp-w:2"][0] == [float(s) for s in range(10)]
        # the side panel's compare (its API: /ktrain/api/compare?jobs=cmp-w:1,cmp-w:2)
        panel = PanelCore.from_names(["local"]).compare(["cmp-w:1", "cmp-w:2"])
        assert panel["jobs"] == ["cmp-w:1", "cmp-w:2"], panel
        assert {"name": "const.LR", "values": {"cmp-w:1": "0.1", "cmp-w:2": "0.3"}} in panel[
            "differ"
        ], panel["differ"]
        for bad, said in (
            ("cmp-w:0 cmp-w:2", "'cmp-w:0' is not a run of a warm job: write NAME:N"),
            ("cmp-w:1 cmp-w:7", "The warm job 'cmp-w' has no run 7."),
        ):
            result = shell.run_cell(f"%ktrain compare {bad}")
            captured = capsys.readouterr()
            text = captured.out + captured.err + str(result.error_in_exec or "")
            assert said in text, text
            assert "Traceback" not in text, text
    finally:
        LocalBackend().delete("cmp-w")
        shell.reset(new_session=True)
