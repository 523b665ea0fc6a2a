"""The side panel's API core over job registries written in place: a job that is still running,
a failed one, errors and offsets (over a finished job a real ``%%ktrain`` run made:
tests/integration/test_server_core_processes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_ktrain.backends.base import Job
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import BackendError, ClusterError
from jupyter_ktrain.monitor.cell_error import job_error
from jupyter_ktrain.server.core import PanelCore, decode_offset, encode_offset, http_status


def test_offset_round_trip() -> None:
    counts = {"a-node-0": 12, "a-node-1": 0}
    assert decode_offset(encode_offset(counts)) == counts
    assert decode_offset(None) == {}


def test_other_errors_are_500() -> None:
    assert http_status(BackendError("x")) == 500
    assert http_status(ClusterError("x", status=503)) == 500


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


def test_a_failed_jobs_detail_starts_with_why(tmp_path: Path) -> None:
    from tests.panel_failed import FAILED, LAST_LINE, write_failed_job

    home = tmp_path / "home"
    write_failed_job(home)
    core = PanelCore({"local": lambda: LocalBackend(home)})
    detail = core.job(FAILED)
    failure = detail["failure"]
    assert failure is not None
    assert failure.startswith(
        f"Job {FAILED!r} failed: rank 1 raised {LAST_LINE}; rank 0 was stopped."
    )
    assert LAST_LINE in failure
    # the cell's error, word for word: one text (its last lines end with the exception line)
    backend = LocalBackend(home)
    error = job_error(Job(FAILED, backend), backend.status(FAILED))
    assert failure == str(error).strip()
    assert f"    {LAST_LINE}" in failure.split("Last lines of rank 1:")[1]
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


def _node(job_dir: Path, node: int, lines: list[str], t0: float) -> None:
    (job_dir / f"node-{node}.log").write_text("".join(f"{line}\n" for line in lines))
    (job_dir / f"node-{node}.times").write_text(
        "".join(f"{t0 + 0.001 * i:.6f}\n" for i in range(len(lines)))
    )


def test_the_log_tab_folds_teardown_noise_and_labels_trainer_lines_as_the_widget_does(
    tmp_path: Path,
) -> None:
    """A 2 x 1 job whose node 1 printed torchrun's tear-down noise at its good end, and whose
    two ranks printed the Trainer's log dict alike, node 1's copy first: the tab shows the
    noise as one line that says it is harmless (held while the block may go on, never shown
    in part), and the Trainer line once, under rank 0 (as the widget does)."""
    from jupyter_ktrain.monitor.torchrun import teardown_line

    backend = LocalBackend(tmp_path / "home")
    job_dir = backend.job_dir("ddp")
    job_dir.mkdir(parents=True)
    (job_dir / "plan.json").write_text("{}")
    (job_dir / "job.json").write_text('{"nodes": 2, "procs": 1}')
    (job_dir / "state.json").write_text('{"state": "Running"}')
    trainer = "{'loss': 0.52, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': 1.0}"
    noise = (
        (Path(__file__).resolve().parents[1] / "data" / "logs")
        .joinpath("torchrun_exit_barrier_node1.log")
        .read_text()
        .splitlines()[1:]
    )
    _node(job_dir, 0, ["[rank0]: up", f"[rank0]: {trainer}", "[rank0]: done"], 1000.5)
    _node(job_dir, 1, ["[rank1]: up", f"[rank1]: {trainer}", *noise], 1000.0)
    core = PanelCore({"local": lambda: backend})
    first = core.logs("ddp")
    shown = [(line["label"], line["text"]) for line in first["lines"]]
    assert shown == [("rank1", "up"), ("rank0", trainer), ("rank0", "up")]
    (job_dir / "state.json").write_text('{"state": "Succeeded"}')
    rest = core.logs("ddp", offset=first["next_offset"])
    shown = [(line["label"], line["text"]) for line in rest["lines"]]
    assert shown == [("node@1", teardown_line("ddp", barrier=True)), ("rank0", "done")]
    assert rest["terminal"] is True
    whole = core.logs("ddp")  # read again from the start: the same lines
    assert len(whole["lines"]) == len(first["lines"]) + len(rest["lines"])


def test_ktrain_logs_folds_the_same_noise_and_whole_shows_it_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ktrain logs NAME`` (and ``%ktrain logs``) shows every rank's lines as the panel and
    the widget do: torchrun's tear-down noise as its one line; ``--whole`` as written."""
    from jupyter_ktrain.frontends import commands
    from jupyter_ktrain.monitor.torchrun import teardown_line

    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path / "home"))
    job_dir = LocalBackend().job_dir("ddp")
    job_dir.mkdir(parents=True)
    (job_dir / "plan.json").write_text("{}")
    (job_dir / "job.json").write_text('{"nodes": 2, "procs": 1}')
    (job_dir / "state.json").write_text('{"state": "Succeeded"}')
    written = (
        (Path(__file__).resolve().parents[1] / "data" / "logs")
        .joinpath("torchrun_exit_barrier_node1.log")
        .read_text()
        .splitlines()
    )
    _node(job_dir, 0, ["[rank0]: hello from 0 of 2"], 1000.0)
    _node(job_dir, 1, written, 1000.0)
    shown = commands.run(["logs", "ddp", "--backend", "local"]).text.splitlines()
    assert shown == [
        "[rank0]: hello from 0 of 2",
        "[rank1]: hello from 1 of 2",
        teardown_line("ddp", barrier=True),
    ]
    whole = commands.run(["logs", "ddp", "--backend", "local", "--whole"]).text.splitlines()
    assert whole == ["[rank0]: hello from 0 of 2", *written]
    grep = commands.run(["logs", "ddp", "--backend", "local", "--grep", "harmless"]).text
    assert grep.strip() == teardown_line("ddp", barrier=True)
