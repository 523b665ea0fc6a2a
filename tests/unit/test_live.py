"""The follow loop's sink: statuses and lines from a backend become the model the views
read (state, replica table, node numbers, metrics), and the one text view prints them."""

from __future__ import annotations

import io

import pytest

from jupyter_ktrain.jobs import JobShape, JobStatus, ReplicaStatus
from jupyter_ktrain.monitor.live import ModelSink, model_from_logs
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.monitor.stragglers import STEP_TIME
from jupyter_ktrain.monitor.text import TextView
from jupyter_ktrain.pod.protocol import (
    format_agent_line,
    format_rank_line,
    format_record,
    parse_line,
)
from jupyter_ktrain.widgets.plots import metrics_figure

T0 = 1_763_700_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _status(state: str, *phases: str, reason: str = "") -> JobStatus:
    replicas = tuple(
        ReplicaStatus(f"j-node-{i}", p, node="127.0.0.1", exit_code=0 if p == "Succeeded" else None)
        for i, p in enumerate(phases)
    )
    return JobStatus("j", state, reason=reason, replicas=replicas, started=T0)


def test_sink_feeds_state_replicas_lines_and_metrics_and_the_text_view_prints_them() -> None:
    clock = Clock()
    model = MonitorModel(JobHeader(name="j", shape=JobShape(nodes=2, procs_per_node=2)))
    out = io.StringIO()
    view = TextView(model, out, metric_every=0, clock=clock)
    sink = ModelSink(model, view, clock=clock)
    view.show()
    sink.status(_status("Running", "Running", "Running"))
    clock.now += 2
    # node 1's stream arrives first: node numbers still follow the replica table
    sink.lines("j-node-1", [parse_line(format_rank_line(3, "hello from 3"))])
    sink.lines("j-node-0", [parse_line(format_agent_line("GPU sampling off")),
                            parse_line(format_rank_line(0, format_record(
                                {"type": "metric", "step": 1, "loss": 0.5})))])  # fmt: skip
    sink.tick()
    clock.now += 5
    sink.status(_status("Succeeded", "Succeeded", "Succeeded", reason="AllRanksSucceeded"))
    view.close()

    assert model.header.state == "Succeeded"
    assert model.header.elapsed(clock.now) == 7.0
    assert [r.last_event for r in model.replicas] == ["exited with code 0"] * 2
    assert model.labels() == ["rank3", "agent@0"]
    assert model.metrics[(0, "loss")].count == 1
    assert sink.final is not None
    lines = out.getvalue().splitlines()
    assert "[rank3]: hello from 3" in lines
    assert "[agent@0] GPU sampling off" in lines
    assert "[ktrain] metrics (rank 0 step 1): loss 0.5" in lines
    assert lines[-1] == "[ktrain] j Succeeded after 7s (AllRanksSucceeded)"


def test_model_from_stored_logs_plots_every_rank() -> None:
    stored = [
        (f"j-node-{rank // 2}", format_rank_line(rank, format_record(
            {"type": "metric", "step": step, "loss": 1.0 / step, "t": T0 + step})))
        for step in range(1, 11) for rank in range(4)
    ]  # fmt: skip
    model = model_from_logs("j", stored)
    # each rank's step time too, once every rank reported a step (stragglers.py)
    assert model.metric_names() == ["loss", STEP_TIME]
    fig = metrics_figure(model)
    assert sorted(t.name for t in fig.data) == [
        *(f"loss: rank {r}" for r in range(4)),
        *(f"{STEP_TIME}: rank {r}" for r in range(4)),
    ]
    assert list(fig.data[0].x) == [float(s) for s in range(1, 11)]
    assert metrics_figure(model_from_logs("empty", [])) is None


def test_a_ray_drivers_tasks_reporting_out_of_order_keep_every_point() -> None:
    """A RayJob's tasks report as the driver (rank 0), at once: step 1 after step 2 is another
    task's, come late. Read back knowing the kind, nothing is dropped; a PyTorchJob's step
    going back is a restart, whose steps replace the earlier ones."""
    stored = [
        ("ray-head", format_rank_line(0, format_record(
            {"type": "metric", "step": step, "task": float(step), "t": T0 + i})))
        for i, step in enumerate((0, 2, 1))
    ]  # fmt: skip
    ray = model_from_logs("ray", stored, kind="RayJob")
    assert list(ray.metrics[(0, "task")].points()[1]) == [0.0, 1.0, 2.0]
    torch = model_from_logs("pt", stored)
    assert list(torch.metrics[(0, "task")].points()[1]) == [0.0, 1.0]


def test_every_rank_gets_an_exit_code_once_the_job_ended() -> None:
    """A 2 x 2 job where rank 3 failed and rank 2 was stopped with its node before it could
    report: rank 2 gets its node's code, so ``exit_codes`` names all four ranks."""
    from jupyter_ktrain.jobs import JobStatus, ReplicaStatus, complete_exit_codes

    replicas = (ReplicaStatus("j-node-0", "Succeeded", exit_code=0),
                ReplicaStatus("j-node-1", "Failed", exit_code=143))  # fmt: skip
    ended = JobStatus("j", "Failed", exit_codes={0: 0, 1: 0, 3: 1}, replicas=replicas)
    assert complete_exit_codes(ended, 2).exit_codes == {0: 0, 1: 0, 2: 143, 3: 1}
    running = JobStatus("j", "Running", exit_codes={3: 1}, replicas=replicas)
    assert complete_exit_codes(running, 2).exit_codes == {3: 1}  # only once it ended


def test_a_job_its_cancel_removed_reads_cancelled_not_gone() -> None:
    """On Kubernetes, cancel deletes the job: the handle that cancelled it (the cell's
    follow loop, the widget's Cancel) reads Cancelled, its own final state, not "not found";
    another handle still learns that the job is gone."""
    from jupyter_ktrain.backends.base import Backend, Job
    from jupyter_ktrain.errors import JobNotFound
    from jupyter_ktrain.jobs import TERMINAL_STATES, JobStatus

    class Deleting(Backend):
        name = "kubernetes"
        gone = False

        def status(self, name: str) -> JobStatus:
            if self.gone:
                raise JobNotFound(f"Job {name!r} is gone from namespace 'team'.")
            return JobStatus(name, "Running")

        def cancel(self, name: str) -> None:
            self.gone = True

        dryrun = schedule = log_sources = list_jobs = delete = read_logs = None  # type: ignore[assignment]

    backend = Deleting()
    job, other = Job("j", backend), Job("j", backend)
    assert job.state == "Running"
    job.cancel()
    status = job.status()
    assert (status.state, status.reason) == ("Cancelled", "CancelledByUser")
    assert "Cancelled" in TERMINAL_STATES
    with pytest.raises(JobNotFound):  # a handle that did not cancel invents no state
        other.status()


def test_series_rebuilt_from_a_real_node_log_start_at_zero_seconds() -> None:
    # The log opens with plain lines (agent, torchrun, NCCL); they must not pin the start to 0.
    from pathlib import Path

    log = Path(__file__).resolve().parents[1] / "data" / "logs" / "h100_1x1_node0.log"
    stored = [("j-node-0", line) for line in log.read_text().splitlines()]
    model = model_from_logs("j", stored)
    xs, temps = model.gpus[(0, 0, "temp")].points()
    assert list(xs) == [float(i) for i in range(8)]  # seconds since the first record
    assert (temps[0], temps[-1]) == (37.0, 68.0)
    assert model.metrics[(0, "loss")].points()[0][0] == 100.0  # metrics keep their steps
    # with the job's own start time (what the side panel knows), x counts from it
    started = model_from_logs("j", stored, start_time=1795407390.113)
    assert list(started.gpus[(0, 0, "util")].points()[0])[:2] == [2.0, 3.0]
