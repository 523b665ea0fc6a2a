"""The typed records: every record type reads back what it writes, lines an older job wrote
still read, and one fold gives a job's progress from its ranks' records."""

from __future__ import annotations

import json

from jupyter_ktrain.pod.progress import JobProgress
from jupyter_ktrain.pod.protocol import (
    RECORD_CLASSES,
    RECORD_TYPES,
    Checkpoint,
    Exit,
    Gpu,
    Metric,
    Profile,
    Ready,
    Restart,
    Result,
    Resume,
    Run,
    RunEnd,
    Stack,
    format_rank_line,
    parse_line,
    parse_record,
)

SAMPLES = [
    Metric(0, 1.5, 3, 10, {"loss": 0.5}),
    Gpu(1, 0, "GPU-x", 2.0, util=97.0, mem_used=100.0),
    Result({"x": "gAR9lC4="}),
    Exit(2, 143),
    Restart(1, 3, "mpirun was killed"),
    Checkpoint(5, 1024, 0.1, 0.01, 0.09, "step-5", 4, 0, 3.0),
    Resume(5, "step-5", 4, 0, 3.5),
    Run(2, 0, 10.0),
    RunEnd(2, 1, 143, "rank 1 failed", "", 11.0),
    Ready(0, 1.25),
    Stack(1, 42, (("MainThread", (("cell [4]", 31, "train", "dist.all_reduce(t)"),)),), t=4.0),
    Profile(1, 42, 5, 8, "cpu", 0.3, 0.2, 0.06, 0.04, (("aten::mm", 3, 0.1),), "H4sI", "", ""),
]


def test_every_record_type_has_a_class_and_reads_back_what_it_writes() -> None:
    assert sorted(cls.TYPE for cls in RECORD_CLASSES) == sorted(RECORD_TYPES)
    assert sorted(type(r).TYPE for r in SAMPLES) == sorted(RECORD_TYPES)
    for record in SAMPLES:
        line = parse_line(format_rank_line(0, record.format()))
        assert line.typed == record, record


def test_lines_an_older_job_wrote_read_as_before() -> None:
    old = [  # as pod.report / pod.runtime / pod.checkpoint wrote them, dicts by hand
        '{"type":"metric","rank":1,"t":5.0,"step":4,"total":8,"loss":0.25,"lr":1}',
        '{"type":"exit","rank":3,"code":1}',
        '{"type":"checkpoint","step":7,"bytes":9,"seconds":0.5,"blocked_s":0.1,"write_s":0.4,'
        '"file":"step-7","world_size":2,"rank":0,"t":9.0}',
        '{"type":"resume","step":7,"file":"step-7","world_size":2,"rank":0,"t":9.5}',
    ]
    typed = [parse_line(format_rank_line(1, "@@ktrain " + raw)).typed for raw in old]
    assert typed[0] == Metric(1, 5.0, 4, 8, {"loss": 0.25, "lr": 1.0})
    assert typed[1] == Exit(3, 1)
    assert typed[2] == Checkpoint(7, 9, 0.5, 0.1, 0.4, "step-7", 2, 0, 9.0)
    assert typed[3] == Resume(7, "step-7", 2, 0, 9.5)
    # the wire form of a record written today is the one written before
    assert json.loads(Metric(1, 5.0, 4, 8, {"loss": 0.25}).format()[len("@@ktrain ") :]) == {
        "type": "metric", "rank": 1, "t": 5.0, "step": 4, "total": 8, "loss": 0.25,
    }  # fmt: skip


def test_an_unknown_or_broken_record_is_none_not_an_error() -> None:
    assert parse_record({"type": "from-a-newer-job", "x": 1}) is None
    assert parse_record({"type": "resume"}) is None  # no step
    assert parse_record({"type": "stack", "rank": 0, "threads": [{"name": "x"}]}) is None
    assert parse_record({"type": "stack", "rank": 0, "why": "no answer"}) == Stack(
        0, why="no answer"
    )
    assert parse_record(None) is None
    assert parse_line("[rank0]: plain text").typed is None


def test_the_lowest_reporting_rank_is_the_jobs_progress() -> None:
    fold = JobProgress()
    assert fold.feed(1, Metric(1, 10.0, 0, 100), now=0) is not None  # rank 1 first: its
    assert fold.feed(0, Metric(0, None, 4, 100), now=11.0) is not None  # rank 0 comes: its
    assert fold.feed(1, Metric(1, 12.0, 9, 100), now=0) is None  # rank 1 no longer counts
    assert fold.feed(0, Metric(0, 13.0, 5, None), now=0) is None  # no total: no progress
    assert fold.progress is not None
    assert (fold.progress.step, fold.progress.t, fold.rank) == (4, 11.0, 0)


def test_a_plan_reads_back_an_old_one_reads_and_a_newer_one_is_refused(tmp_path) -> None:
    import pytest

    from jupyter_ktrain.backends.local.request import (
        LocalRequest,
        NodeLaunch,
        PlanError,
        read_plan,
    )

    plan = LocalRequest(2950, "m1", (NodeLaunch(("python", "-c", "1"), {"A": "1"}, "/"),), 2, 0.5)
    (tmp_path / "plan.json").write_text(json.dumps(plan.to_json()))
    assert read_plan(tmp_path) == plan
    old = {k: v for k, v in plan.to_json().items() if k not in ("version", "max_restarts")}
    (tmp_path / "plan.json").write_text(json.dumps(old))
    assert read_plan(tmp_path).max_restarts is None  # from before restarts: never restarted
    (tmp_path / "plan.json").write_text(json.dumps({**plan.to_json(), "version": 99}))
    with pytest.raises(PlanError, match="version 99, written by a newer jupyter-ktrain"):
        read_plan(tmp_path)


def test_a_state_reads_back_an_old_one_reads_and_a_newer_one_is_refused(tmp_path) -> None:
    import pytest

    from jupyter_ktrain.backends.local.folders import to_status
    from jupyter_ktrain.backends.local.state import (
        LocalState,
        NodeState,
        StateError,
        WarmState,
        change_state,
        read_state,
        save_state,
    )
    from jupyter_ktrain.jobs import CANCELLED, FAILED, RUNNING
    from jupyter_ktrain.pod.progress import Progress

    (tmp_path / ".state.lock").write_text("")
    state = LocalState(
        RUNNING, supervisor_pid=7, nodes=(NodeState(11, None, 1, "restarted after exit 137"),),
        exit_codes={1: 137, 0: 143}, failed_rank=1, progress=Progress(3, 10, 2.0, 1.0),
        warm=WarmState(runs=2, active=2),
    )  # fmt: skip
    assert save_state(tmp_path, state)
    assert read_state(tmp_path) == state
    # a field at a time keeps the others; the first end written stands
    assert change_state(tmp_path, state=FAILED, reason="RankFailed")
    assert read_state(tmp_path) == LocalState(
        **{**vars(state), "state": FAILED, "reason": "RankFailed"}
    )
    assert not change_state(tmp_path, state=CANCELLED)
    # a file from before versions (what a supervisor wrote then) reads, missing entries default
    old = {"state": "Succeeded", "exit_codes": {"0": 0}, "nodes": [{"pid": 3, "exit_code": 0}]}
    (tmp_path / "state.json").write_text(json.dumps(old))
    job = to_status("old", read_state(tmp_path), None)
    assert (job.state, job.exit_codes, job.replicas[0].phase) == ("Succeeded", {0: 0}, "Succeeded")
    (tmp_path / "state.json").write_text(json.dumps({**state.to_json(), "version": 99}))
    with pytest.raises(StateError, match="version 99, written by a newer jupyter-ktrain") as e:
        read_state(tmp_path)
    assert "\n" not in str(e.value)
    assert str(e.value).endswith("use that version for this job, or delete it")
