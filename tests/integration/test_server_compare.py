"""The panel's comparison over a real local job registry: two finished jobs made by real
tiny ``%%ktrain`` runs that differ in one flag (``--nodes``) and in their length, compared as
``%ktrain compare`` compares them (one metric overlaid, what differed beside it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import JobNotFound, SpecError
from jupyter_ktrain.server.core import PanelCore, http_status

from ..panel_jobs import run_job


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("panel-compare") / "ktrain-home"
    run_job(home, "cmp-two", nodes=2, steps=5)
    run_job(home, "cmp-one", nodes=1, steps=8)
    return home


@pytest.fixture
def core(home: Path, monkeypatch: pytest.MonkeyPatch) -> PanelCore:
    monkeypatch.setenv("KTRAIN_HOME", str(home))  # the jobs' records (params) live there
    return PanelCore({"local": lambda: LocalBackend(home)}, plot_points=4)


def test_both_curves_of_the_metric_and_the_flag_that_differed(core: PanelCore) -> None:
    payload = core.compare(["cmp-two", "cmp-one"])
    assert (payload["backend"], payload["metric"]) == ("local", "loss")
    assert payload["jobs"] == ["cmp-two", "cmp-one"]
    assert "loss" in payload["metrics"]
    curves = {c["job"]: c for c in payload["curves"]}
    assert set(curves) == {"cmp-two", "cmp-one"}
    # rank 0's loss, 1/step, downsampled to the panel's points with its ends kept; ``last``
    # is the job's own last value
    assert len(curves["cmp-two"]["x"]) <= 5
    assert curves["cmp-two"]["x"][0] == 1.0
    assert curves["cmp-one"]["x"][-1] == 8.0
    assert curves["cmp-one"]["last"] == pytest.approx(1 / 8)
    assert curves["cmp-two"]["last"] == pytest.approx(1 / 5)
    assert curves["cmp-two"]["colour"] != curves["cmp-one"]["colour"]
    differ = {p["name"]: p["values"] for p in payload["differ"]}
    assert differ["nodes"] == {"cmp-two": "2", "cmp-one": "1"}
    assert "procs_per_node" not in differ  # the same in both: not listed
    assert "name" not in differ  # each job's own name heads its column already


def test_another_metric_and_bad_requests(core: PanelCore) -> None:
    with pytest.raises(SpecError, match="needs two jobs or more") as exc:
        core.compare(["cmp-two"])
    assert http_status(exc.value) == 400
    with pytest.raises(SpecError, match="reported 'nope'"):
        core.compare(["cmp-two", "cmp-one"], metric="nope")
    with pytest.raises(JobNotFound) as gone:
        core.compare(["cmp-two", "missing"])
    assert http_status(gone.value) == 404
