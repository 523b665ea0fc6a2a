"""Stragglers named (jupyter_ktrain.monitor.stragglers, the model's ``straggler`` alert and its
"step time" series): from when each rank reports each step."""

from __future__ import annotations

from jupyter_ktrain.jobs import JobShape
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.monitor.stragglers import STEP_TIME, StepTimes
from jupyter_ktrain.pod.protocol import format_rank_line, format_record

T0 = 1_763_700_000.0


def _reports(
    compute: dict[int, float], steps: int, comm: float = 0.01
) -> list[tuple[int, int, float]]:
    """(rank, step, t) of a lockstep job: each rank computes, reports, then all-reduces; the
    collective ends when the slowest arrives."""
    out, end = [], T0
    for step in range(steps):
        for rank, c in compute.items():
            out.append((rank, step, end + c))
        end += max(compute.values()) + comm
    return out


def test_the_rank_that_computes_longest_is_named_after_twenty_steps_in_a_row() -> None:
    times = StepTimes()
    compute = {0: 0.2, 1: 0.2, 2: 0.41, 3: 0.2}
    estimates: dict[int, list[float]] = {}
    for i, (rank, step, t) in enumerate(_reports(compute, 25)):
        for r, s in times.feed(rank, step, t).items():
            estimates.setdefault(r, []).append(s)
        if step == 19 and i % 4 == 3:
            assert times.straggler is None  # 19 steps of estimates: not yet
    assert times.straggler is not None
    assert times.straggler.rank == 2
    assert round(times.straggler.seconds, 2) == 0.42
    assert round(times.straggler.median, 2) == 0.21
    assert times.straggler.ratio > 1.25
    assert round(estimates[0][-1], 2) == 0.21  # its compute, plus the collective's own time
    # it catches up: named no more
    for rank, step, t in _reports({0: 0.2, 1: 0.2, 2: 0.2, 3: 0.2}, 2):
        times.feed(rank, step + 100, t + 100)
    assert times.straggler is None


def test_a_job_that_reports_after_its_collectives_names_nobody() -> None:
    times = StepTimes()
    for step in range(40):
        for rank in range(4):  # the same moment on every rank: all wait for the slowest
            times.feed(rank, step, T0 + 0.5 * step + 0.001 * rank)
    assert times.straggler is None
    times.forget()
    assert times.feed(0, 0, T0) == {}


def test_the_model_plots_each_ranks_step_time_and_names_the_straggler_with_node_and_gpu() -> None:
    header = JobHeader(
        name="j", backend="local", shape=JobShape(nodes=2, procs_per_node=2, gpus_per_node=2)
    )
    m = MonitorModel(header)
    m.set_state("Running", T0)
    for rank, step, t in _reports({0: 0.2, 1: 0.2, 2: 0.2, 3: 0.45}, 30):
        rec = format_record({"type": "metric", "rank": rank, "step": step, "t": t, "loss": 1.0})
        m.feed_text(format_rank_line(rank, rec), t, node=rank // 2)
    assert sorted(r for r, name in m.metrics if name == STEP_TIME) == [0, 1, 2, 3]
    xs, ys = m.metrics[(3, STEP_TIME)].points(100)
    assert xs[0] == 1.0  # step 0 has no step before it
    assert round(ys[-1], 2) == 0.46
    [alert] = [a for a in m.alerts() if a.code == "straggler"]
    assert alert.message.startswith(
        "rank 3 (node 1, GPU 1) is the slowest: its steps take 0.46 s against a median of 0.21 s"
    ), alert.message
    assert "every other rank waits for it" in alert.message
    m.set_state("Succeeded", T0 + 100)
    assert [a.code for a in m.alerts()] == ["straggler"]  # what slowed the job stays said


def test_a_long_job_keeps_a_bounded_window_of_steps_and_goes_on_estimating() -> None:
    """Past the kept window (4,096 steps) the oldest steps are dropped, their estimates too:
    a job of 12,000 steps holds a few thousand, and the step times and the straggler still come
    at its end."""
    times = StepTimes()
    last: dict[int, float] = {}
    for rank, step, t in _reports({0: 0.1, 1: 0.1}, 11_970) + [
        (rank, step + 11_970, t + 11_970 * 0.11)  # after the first part's last step
        for rank, step, t in _reports({0: 0.1, 1: 0.3}, 30)
    ]:
        last = times.feed(rank, step, t) or last
    assert len(times._times) <= 4096 + 1024
    assert len(times._done) <= 4096 + 1024
    assert set(last) == {0, 1}
    assert times.straggler is not None
    assert (times.straggler.rank, times.straggler.step) == (1, 11_999)
