"""The side panel's API core over a real local job registry: one finished 2-node job made by
a real tiny ``%%ktrain`` run (~5 s, once per module), plus a job that is still running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_ktrain.backends.base import Backend
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import BackendError, ClusterError, JobNotFound, SpecError
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.server.core import PanelCore, decode_offset, encode_offset, http_status

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
    [panel] = core.metrics(NAME)["panels"]
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


def test_offset_round_trip() -> None:
    counts = {"a-node-0": 12, "a-node-1": 0}
    assert decode_offset(encode_offset(counts)) == counts
    assert decode_offset(None) == {}


def test_other_errors_are_500() -> None:
    assert http_status(BackendError("x")) == 500
    assert http_status(ClusterError("x", status=503)) == 500


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


def test_running_job_holds_back_each_replicas_last_line(tmp_path: Path) -> None:
    """While a job runs, a replica's last stored line may be half written: it waits."""
    home = tmp_path / "home"
    backend = LocalBackend(home)
    job_dir = backend.job_dir("half-written")
    job_dir.mkdir(parents=True)
    (job_dir / "plan.json").write_text("{}")
    (job_dir / "job.json").write_text('{"nodes": 1}')
    (job_dir / "state.json").write_text('{"state": "Running"}')
    (job_dir / "node-0.log").write_text("[rank0]: one\n[rank0]: tw")
    core = PanelCore({"local": lambda: backend})
    first = core.logs("half-written")
    assert [line["text"] for line in first["lines"]] == ["one"]
    assert first["terminal"] is False
    (job_dir / "node-0.log").write_text("[rank0]: one\n[rank0]: two\n[rank0]: thr")
    second = core.logs("half-written", offset=first["next_offset"])
    assert [line["text"] for line in second["lines"]] == ["two"]


def test_served_backends_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from jupyter_ktrain.server import BACKENDS_ENV, served_backends

    monkeypatch.setenv(BACKENDS_ENV, " local , kubernetes ")
    assert served_backends() == ["local", "kubernetes"]
    monkeypatch.delenv(BACKENDS_ENV)
    assert served_backends()[0] == "local"


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


def test_a_failed_jobs_detail_starts_with_why(tmp_path: Path) -> None:
    from tests.panel_failed import FAILED, LAST_LINE, write_failed_job

    home = tmp_path / "home"
    write_failed_job(home)
    core = PanelCore({"local": lambda: LocalBackend(home)})
    detail = core.job(FAILED)
    failure = detail["failure"]
    assert failure is not None
    assert failure.startswith(
        f"Job {FAILED!r} failed: rank 1 raised {LAST_LINE}; rank 0 ended with an error too."
    )
    assert LAST_LINE in failure
    texts = [line["text"] for line in core.logs(FAILED)["lines"]]
    assert texts[:3] == ["epoch 1 loss 0.9", "epoch 1 loss 0.8", "epoch 2 loss 0.7"]
    assert detail["exit_codes"] == {"0": 143, "1": 1}


def test_progress_of_a_running_job_counts_down_at_the_server_clock(tmp_path: Path) -> None:
    """The panel's list and job tab get percent done and the time left now (the supervisor
    wrote the ETA as of its last update), worded as in the notebook."""
    from jupyter_ktrain.pod.progress import Progress

    backend = LocalBackend(tmp_path / "home")
    # steps 0..9 done (ten of 40) at 1006, 2 s a step
    for name, progress in (("halfway", Progress(9, 40, 1006.0, 60.0, 2.0)), ("silent", None)):
        job_dir = backend.job_dir(name)
        job_dir.mkdir(parents=True)
        (job_dir / "plan.json").write_text("{}")
        (job_dir / "job.json").write_text('{"nodes": 1}')
        state = {"state": "Running", "started": 990.0}
        if progress is not None:
            state["progress"] = progress.to_dict()  # type: ignore[assignment]
        (job_dir / "state.json").write_text(json.dumps(state))
    core = PanelCore({"local": lambda: backend}, clock=lambda: 1010.0)
    rows = {j["name"]: j for j in core.jobs()["jobs"]}
    assert rows["halfway"]["progress"] == {
        "step": 9,
        "done": 10,
        "total": 40,
        "percent": 25.0,
        "eta_s": 56.0,
        "text": "25% (10/40) · 56s left",
        "short": "25% · 56s",  # the list's cell, worded by the server
    }
    # no step for 14 s at 2 s a step: waiting, not a time left counting down to 0
    later = PanelCore({"local": lambda: backend}, clock=lambda: 1020.0).job("halfway")
    assert later["progress"] is not None
    assert later["progress"]["text"] == "25% (10/40) · waiting (no step for 14s)"
    assert later["progress"]["short"] == "25% · waiting"
    assert rows["silent"]["progress"] is None
    assert core.job("halfway")["progress"] == rows["halfway"]["progress"]
