"""The side panel's API core over a real local job registry: one finished 2-node job made by
a real tiny ``%%ktrain`` run (~5 s, once per module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.backends.base import Backend
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import ClusterError, JobNotFound, SpecError
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.server.core import PanelCore, http_status

from ..panel_jobs import run_job

NAME = "panel-core-done"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("panel-core") / "ktrain-home"
    run_job(home, NAME, nodes=2, steps=5)
    return home


@pytest.fixture
def core(home: Path) -> PanelCore:
    return PanelCore({"local": lambda: LocalBackend(home)}, clock=lambda: 2e9)


def test_jobs_lists_the_finished_job_with_backend_state_and_age(core: PanelCore) -> None:
    payload = core.jobs()
    assert payload["problems"] == []
    [job] = payload["jobs"]
    assert (job["name"], job["backend"], job["state"]) == (NAME, "local", "Succeeded")
    assert job["started"] is not None
    assert job["age_s"] == pytest.approx(2e9 - job["started"], abs=0.1)


def test_job_detail_has_replicas_and_exit_codes(core: PanelCore) -> None:
    detail = core.job(NAME)
    assert detail["terminal"] is True
    assert [r["name"] for r in detail["replicas"]] == [f"{NAME}-node-0", f"{NAME}-node-1"]
    assert all(r["phase"] == "Succeeded" and r["exit_code"] == 0 for r in detail["replicas"])
    assert detail["exit_codes"] == {"0": 0, "1": 0}


def test_logs_have_every_ranks_lines_and_no_records(core: PanelCore) -> None:
    payload = core.logs(NAME)
    texts = [(line["label"], line["text"]) for line in payload["lines"]]
    for rank in (0, 1):
        for step in range(1, 6):
            assert (f"rank{rank}", f"rank {rank} step {step} hello") in texts
    assert not any("@@ktrain" in t for _, t in texts)
    assert payload["terminal"] is True
    assert payload["more"] is False


def test_logs_filter_by_rank_and_grep(core: PanelCore) -> None:
    only1 = core.logs(NAME, rank=1)["lines"]
    assert only1
    assert {line["rank"] for line in only1} == {1}
    step3 = core.logs(NAME, grep="step 3 ")["lines"]
    assert sorted(line["text"] for line in step3) == ["rank 0 step 3 hello", "rank 1 step 3 hello"]


def test_logs_offset_returns_only_newer_lines(core: PanelCore, home: Path) -> None:
    first = core.logs(NAME)
    again = core.logs(NAME, offset=first["next_offset"])
    assert again["lines"] == []
    # a line appended to node 1's log later is the only one the next call returns
    with open(LocalBackend(home).job_dir(NAME) / "node-1.log", "a") as f:
        f.write("[rank1]: late line\n")
    try:
        newer = core.logs(NAME, offset=first["next_offset"])["lines"]
        assert [(line["label"], line["text"]) for line in newer] == [("rank1", "late line")]
    finally:
        path = LocalBackend(home).job_dir(NAME) / "node-1.log"
        path.write_text(path.read_text().replace("[rank1]: late line\n", ""))


def test_logs_stop_at_the_line_limit_and_continue(home: Path) -> None:
    small = PanelCore({"local": lambda: LocalBackend(home)}, max_lines=3)
    seen: list[str] = []
    offset = None
    for _ in range(50):
        page = small.logs(NAME, grep="hello", offset=offset)
        assert len(page["lines"]) <= 3
        seen += [line["text"] for line in page["lines"]]
        offset = page["next_offset"]
        if not page["more"]:
            break
    assert len(seen) == 10
    assert len(set(seen)) == 10


def test_metrics_rebuilt_from_logs_one_trace_per_rank(core: PanelCore) -> None:
    panels = core.metrics(NAME)["panels"]
    [panel] = [p for p in panels if p["name"] == "loss"]  # each rank's step time has its own
    assert (panel["name"], panel["x_title"]) == ("loss", "step")
    traces = {t["label"]: t for t in panel["traces"]}
    assert set(traces) == {"rank 0", "rank 1"}
    assert traces["rank 1"]["x"] == [1, 2, 3, 4, 5]
    assert traces["rank 1"]["y"] == pytest.approx([1 + 1 / s for s in range(1, 6)])


def test_unknown_job_is_job_not_found_404(core: PanelCore) -> None:
    with pytest.raises(JobNotFound, match="no-such-job") as info:
        core.job("no-such-job")
    assert http_status(info.value) == 404
    with pytest.raises(JobNotFound):
        core.logs("no-such-job")


@pytest.mark.parametrize("bad", ["../etc", "UPPER", "a b", ""])
def test_bad_name_is_spec_error_400(core: PanelCore, bad: str) -> None:
    with pytest.raises(SpecError) as info:
        core.job(bad)
    assert http_status(info.value) == 400


def test_bad_offset_and_unknown_backend_are_spec_errors(core: PanelCore) -> None:
    with pytest.raises(SpecError, match="next_offset"):
        core.logs(NAME, offset="garbage!")
    with pytest.raises(SpecError, match="kubernetes"):
        core.job(NAME, backend="kubernetes")


class _Unreachable(Backend):
    """A backend whose cluster cannot be reached: every call raises ClusterError."""

    name = "kubernetes"

    def _down(self, *_a: object) -> JobStatus:
        raise ClusterError("The Kubernetes API at https://k8s:6443 did not answer.", status=0)

    dryrun = schedule = log_sources = read_logs = cancel = delete = _down  # type: ignore[assignment]
    status = _down  # type: ignore[assignment]

    def list_jobs(self) -> list[JobStatus]:
        self._down()
        return []


def test_unreachable_backend_is_a_problem_not_an_outage(home: Path) -> None:
    core = PanelCore({"local": lambda: LocalBackend(home), "kubernetes": _Unreachable})
    payload = core.jobs()
    assert [j["name"] for j in payload["jobs"]] == [NAME]
    assert payload["problems"] == [
        {"backend": "kubernetes", "error": "The Kubernetes API at https://k8s:6443 did not answer."}
    ]
    assert core.job(NAME)["backend"] == "local"  # found locally despite the dead cluster
    with pytest.raises(ClusterError):
        core.job(NAME, backend="kubernetes")


def test_all_ranks_read_like_one_log_in_time_order(tmp_path: Path) -> None:
    """Two nodes whose ranks print in turn: the all-ranks view interleaves them by time, not
    node 0's file then node 1's (a real job; its supervisor keeps each line's time)."""
    home = tmp_path / "home"
    run_job(home, "turns", nodes=2, steps=4, pause=0.4)
    core = PanelCore({"local": lambda: LocalBackend(home)})
    lines = [line["text"] for line in core.logs("turns")["lines"] if line["rank"] is not None]
    assert lines.index("rank 1 step 1 hello") < lines.index("rank 0 step 3 hello"), lines
    assert lines.index("rank 0 step 1 hello") < lines.index("rank 1 step 3 hello"), lines
    # paging with the cursor gives the same lines in the same order
    small = PanelCore({"local": lambda: LocalBackend(home)}, max_lines=3)
    paged: list[str] = []
    offset = ""
    while True:
        page = small.logs("turns", offset=offset)
        paged += [line["text"] for line in page["lines"] if line["rank"] is not None]
        offset = page["next_offset"]
        if not page["more"]:
            break
    assert sorted(paged) == sorted(lines)
