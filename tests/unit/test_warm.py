"""Warm jobs: the shape that decides reuse, what a difference says, the refusals, the idle
wording, and the warm agent's run loop on real forked processes (no torch needed)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from jupyter_ktrain.backends.warm_shape import check_warm, shape_changes, warm_shape
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.frontends.commands import parse_duration
from jupyter_ktrain.jobs import JobStatus, WarmInfo
from jupyter_ktrain.pod.agent.warm import FolderControl, rank_environ
from jupyter_ktrain.spec.job import JobSpec
from jupyter_ktrain.words import run_waiting, warm_text, warm_words


def test_the_shape_is_what_the_nodes_are_made_with_and_nothing_else() -> None:
    base = JobSpec.create(name="a", nodes=2, procs_per_node=2, warm=True)
    assert warm_shape(base) == warm_shape(JobSpec.create(name="b", nodes=2, procs_per_node=2))
    bigger = JobSpec.create(name="a", nodes=3, procs_per_node=2, env=[("LR", "1")])
    assert shape_changes(warm_shape(base), warm_shape(bigger)) == [
        "--nodes 2 -> 3",
        "--env changed",
    ]


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"kind": "TFJob"}, "--warm is not supported for kind TFJob yet"),
        ({"kind": "MPIJob"}, "--warm is not supported for kind MPIJob yet"),
        ({"kind": "TrainJob"}, "--warm is not supported for kind TrainJob yet"),
        ({"elastic": "1:2"}, "--warm and --elastic do not go together"),
    ],
)
def test_warm_where_it_cannot_run_is_one_clear_error(values: dict[str, str], words: str) -> None:
    spec = JobSpec.create(name="a", warm=True, **values)
    with pytest.raises(SpecError, match=words):
        check_warm(spec)
    check_warm(JobSpec.create(name="a", **values))  # without --warm: nothing to say


def test_warm_with_a_service_account_is_allowed() -> None:
    """The warm pods need no account of their own: the user's is theirs to name."""
    scheduling = {"service_account": "me"}
    check_warm(JobSpec.create(name="a", warm=True, backend="kubernetes", scheduling=scheduling))


def test_idle_wording_and_idle_gpu_hours() -> None:
    info = WarmInfo(runs=3, idle_since=1000.0, idle_limit_s=900.0, gpus=8)
    assert info.idle_gpu_hours(1000.0 + 1800) == pytest.approx(4.0)
    assert (
        warm_text(info, 1000.0 + 120) == "warm, 3 run(s), idle 2m of 15m, 8 GPU(s), 0.27 idle GPU-h"
    )
    assert warm_text(WarmInfo(runs=3, active=3), 0) == "warm, 3 run(s), run 3 running"
    assert [parse_duration(t) for t in ("15m", "90s", "2h", "0", "5")] == [900, 90, 7200, 0, 300]
    with pytest.raises(SpecError, match="--idle 'soon' is not a duration"):
        parse_duration("soon")


def test_a_starting_warm_job_says_its_nodes_import_torch_not_an_idle_clock() -> None:
    starting = WarmInfo(runs=0, idle_since=1000.0, nodes=2, ready=1)
    said = "its nodes import torch (1 of 2 ready)"
    assert warm_text(starting, 1010.0) == f"warm, starting: {said}"
    assert (
        warm_words(JobStatus("w", "Running", warm=starting), 1010.0) == f"warm · starting: {said}"
    )
    assert run_waiting(starting) == f"waiting for the warm job's nodes: {said}"
    ready = WarmInfo(runs=0, idle_since=1000.0, nodes=2, ready=2)
    assert warm_words(JobStatus("w", "Running", warm=ready), 1010.0) == "warm · 0 runs · idle 10s"
    assert run_waiting(ready) == run_waiting(WarmInfo()) == run_waiting(None) == ""


def test_each_rank_gets_what_torchrun_would_give_it() -> None:
    env = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1",
           "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "23456"}  # fmt: skip
    got = rank_environ(env, 1, run=4)
    assert {k: got[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")} == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert (got["MASTER_ADDR"], got["MASTER_PORT"], got["KTRAIN_WARM_RUN"]) == (
        "10.0.0.1",
        "23456",
        "4",
    )


def _order(folder: Path, run: int, program: str) -> None:
    code = folder / "runs" / str(run) / "code"
    code.mkdir(parents=True)
    (code / "program.py").write_text(program)
    (folder / "control.json").write_text(json.dumps({"run": run, "code_dir": str(code)}))


def test_folder_control_orders_runs_and_aborts(tmp_path: Path) -> None:
    control = FolderControl(str(tmp_path), stopping=lambda: False)
    _order(tmp_path, 1, "")
    assert control.next_run(0, time.time()).number == 1  # type: ignore[union-attr]
    assert control.abort_reason(1) is None
    (tmp_path / "runs" / "1" / "abort").write_text("cancelled by the user")
    assert control.abort_reason(1) == "cancelled by the user"
    assert FolderControl(str(tmp_path), stopping=lambda: True).next_run(1, 0) is None


def test_an_ordered_idle_limit_ends_the_wait_and_an_old_run_is_not_rerun(tmp_path: Path) -> None:
    """On Kubernetes the order carries the idle limit (the agents end the job); a node made
    anew joins at the next run, never re-running the one its peers ran."""
    from jupyter_ktrain.pod.agent.warm import WarmNode

    _order(tmp_path, 3, "")
    order = json.loads((tmp_path / "control.json").read_text())
    (tmp_path / "control.json").write_text(json.dumps({**order, "idle_limit_s": 0.2}))
    control = FolderControl(str(tmp_path))
    node = WarmNode({"KTRAIN_WARM_CONTROL": str(tmp_path)}, control)
    assert node._already_ordered() == 3
    started = time.monotonic()
    assert control.next_run(3, time.time()) is None
    assert 0.15 < time.monotonic() - started < 2


def test_while_a_warm_jobs_nodes_start_every_view_says_it_waits_with_a_running_clock() -> None:
    """Its nodes import torch: the job is Pending with what it waits for (the panel's row said
    Running), and the cell's monitor of its first run, Pending too, counts the wait (it said
    ``Pending 0s``, its clock stopped)."""
    from jupyter_ktrain.backends.local.folders import to_status
    from jupyter_ktrain.backends.local.state import LocalState, WarmState
    from jupyter_ktrain.jobs import JobShape
    from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
    from jupyter_ktrain.monitor.text import header_text
    from jupyter_ktrain.words import status_words

    shape = JobShape("PyTorchJob", 2, 1)
    starting = LocalState(state="Running", started=1000.0, warm=WarmState(ready=1))
    status = to_status("w", starting, shape)
    assert (status.state, status.message) == ("Pending", "its nodes import torch (1 of 2 ready)")
    assert status_words(status, 1002.0).line.startswith("Pending · ")
    ready = to_status("w", LocalState(state="Running", warm=WarmState(ready=2)), shape)
    assert (ready.state, ready.message) == ("Running", "")
    m = MonitorModel(JobHeader(name="w", shape=shape, run=1))
    m.set_state("Pending", 1000.0, "waiting for the warm job's nodes: its nodes import torch")
    assert " · Pending 3s · " in header_text(m, 1003.0)
    m.set_state("Running", 1004.0)
    assert " · Running 2s · " in header_text(m, 1006.0)
