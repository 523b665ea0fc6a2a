"""Progress and ETA: percent done, a smoothed ETA that says "unknown" until it knows, and the
same figures in the model, the header, ``Job.status`` and the panel."""

from __future__ import annotations

import pytest

from jupyter_ktrain.jobs import JobShape
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.monitor.text import header_text
from jupyter_ktrain.pod.progress import (
    MIN_INTERVALS,
    JobProgress,
    Progress,
    ProgressTracker,
    fmt_duration,
    progress_short,
)
from jupyter_ktrain.pod.protocol import Metric, Resume, format_rank_line, format_record

T0 = 1_795_000_000.0


def test_eta_is_unknown_until_enough_steps_were_timed_then_counts_down() -> None:
    tracker = ProgressTracker()
    seen = [tracker.update(step, 100, T0 + 2.0 * step) for step in range(MIN_INTERVALS + 1)]
    assert [p.eta_s for p in seen[:MIN_INTERVALS]] == [None] * MIN_INTERVALS
    last = seen[-1]
    # step MIN_INTERVALS is done: MIN_INTERVALS + 1 steps of 100, 2 s a step for the rest
    assert last.eta_s == pytest.approx(2.0 * (100 - MIN_INTERVALS - 1))
    assert last.remaining(last.t + 1) == pytest.approx(last.eta_s - 1)
    near_end = tracker.update(98, 100, last.t + 2.0 * (98 - last.step))
    assert near_end.remaining(near_end.t + 1.9) == 1.0  # a step to go: never "0s left"
    done = MIN_INTERVALS + 1
    assert last.describe(last.t).startswith(f"{done}% ({done}/100) · ")
    assert "ETA unknown" in seen[0].describe(T0)


def test_one_slow_step_moves_the_eta_a_little_not_all_the_way() -> None:
    tracker = ProgressTracker()
    t = T0
    for step in range(0, 11):
        tracker.update(step, 100, t)
        t += 1.0
    steady = tracker.progress
    assert steady is not None
    assert steady.eta_s == pytest.approx(89.0)  # steps 0..10 done: 89 to go at 1 s
    slow = tracker.update(11, 100, t + 19.0)  # one step took 20 s
    assert slow.eta_s is not None
    assert 89.0 < slow.eta_s < 89 * 20.0 / 2  # smoothed: far below "every step takes 20 s"


def test_percent_is_100_only_at_the_last_step_and_a_restart_measures_anew() -> None:
    tracker = ProgressTracker()
    for step in range(0, 1000, 100):
        tracker.update(step, 1000, T0 + step)
    assert tracker.update(998, 1000, T0 + 998).percent == 99.9
    done = tracker.update(999, 1000, T0 + 999)  # steps 0..999: the last one is done
    assert (done.percent, done.remaining(T0 + 1001), done.done) == (100.0, 0.0, True)
    assert done.head() == "100% (1000/1000)"
    resumed = tracker.update(500, 1000, T0 + 5000)  # restarted from a checkpoint
    assert resumed.eta_s is None
    assert resumed.percent == 50.1


def test_progress_round_trips_through_state_json() -> None:
    p = Progress(7, 40, T0, 12.5, 0.4)
    assert Progress.from_dict(p.to_dict()) == p
    assert p.to_dict()["percent"] == 20.0  # steps 0..7 done: 8 of 40
    assert Progress.from_dict({"step": "x"}) is None
    assert Progress.from_dict(None) is None


def _feed(m: MonitorModel, rank: int, step: int, total: int | None, t: float, **kw: float) -> None:
    rec: dict[str, object] = {"type": "metric", "rank": rank, "t": t, "step": step, **kw}
    if total is not None:
        rec["total"] = total
    m.feed_text(format_rank_line(rank, format_record(rec)), t)


def test_the_model_takes_progress_from_the_lowest_rank_and_the_header_shows_it() -> None:
    m = MonitorModel(JobHeader(name="ft", shape=JobShape(nodes=2, procs_per_node=1)))
    m.set_state("Running", T0)
    assert m.progress is None
    _feed(m, 0, 5, None, T0, loss=1.0)  # a loop without a total: plotted, no progress
    assert m.progress is None
    for step in range(0, 6):
        _feed(m, 1, 3 * step, 60, T0 + step)  # rank 1 runs ahead: not the job's progress
        _feed(m, 0, step, 20, T0 + step, loss=1.0 / (step + 1))
    p = m.progress
    assert p is not None
    assert (p.step, p.total, p.percent) == (5, 20, 30.0)
    assert p.eta_s == pytest.approx(14.0)
    assert "total" not in m.metric_names()  # a reserved field, never a plotted series
    text = header_text(m, T0 + 5)
    assert "30% (6/20) · 14s left" in text
    m.set_state("Failed", T0 + 6)
    assert "30% (6/20)" in header_text(m, T0 + 6)
    assert "left" not in header_text(m, T0 + 6)  # a stopped job has no ETA


def test_a_stalled_job_has_no_eta_instead_of_zero_seconds_left() -> None:
    tracker = ProgressTracker()
    for step in range(0, 5):
        tracker.update(step, 100, T0 + 2.0 * step)
    p = tracker.progress
    assert p is not None
    assert p.remaining(p.t + 30) == pytest.approx(p.eta_s - 30)  # 30 s: a slow step, maybe
    assert p.remaining(p.t + 300) is None  # 5 minutes with no step at 2 s a step: stalled
    assert p.describe(p.t + 300) == "5% (5/100) · ETA unknown (no step for 5m 00s)"
    slow = Progress(4, 100, T0, eta_s=96 * 120.0, step_s=120.0)  # 2 min a step: still fine
    assert slow.remaining(T0 + 300) == pytest.approx(96 * 120.0 - 300)


def test_one_duration_wording_for_clocks_times_left_and_narrow_columns() -> None:
    words = [fmt_duration(s) for s in (9, 96, 300, 7625, 97200 + 59)]
    assert words == ["9s", "1m 36s", "5m 00s", "2h 07m", "1d 03h"]
    narrow = [fmt_duration(s, units=1) for s in (41.6, 90, 3590, 5 * 86400)]
    assert narrow == ["42s", "2m", "1h", "5d"]  # rounded; 59m 50s carries into 1h, not 60m
    assert fmt_duration(-3) == "0s"


def test_after_a_resume_the_eta_comes_from_the_rate_since_the_resume() -> None:
    """A run killed after step 10 that resumes from its checkpoint of step 9 about 12 s later
    reports step 10 again: the restart's 12 s are no step time (the ETA read ``4m 05s left``
    with 15 s left), the rate since the resume is (unknown until it is measured)."""
    from jupyter_ktrain.pod.progress import JobProgress
    from jupyter_ktrain.pod.protocol import Metric, Resume

    job = JobProgress()
    for step in range(11):  # 0.3 s a step
        job.feed(0, Metric(0, T0 + 0.3 * step, step, 60), T0)
    back = T0 + 0.3 * 10 + 12.0  # the restart took 12 s
    resumed = job.feed(0, Resume(step=9, rank=0, t=back), back)
    assert resumed is not None
    assert (resumed.step, resumed.eta_s) == (9, None)
    assert resumed.describe(back).endswith(" · restarting")  # until its rate is known
    seen = [job.feed(0, Metric(0, back + 0.3 * (s - 9), s, 60), back) for s in (10, 11)]
    assert seen[0] is not None
    assert seen[0].eta_s is None  # one step since the resume: unknown
    p = job.feed(0, Metric(0, back + 0.3 * 3, 12, 60), back)
    assert p is not None
    assert p.eta_s == pytest.approx(47 * 0.3)  # 47 steps at 0.3 s
    assert p.describe(p.t) == "21.6% (13/60) · 14s left"


def _rec(**fields: object) -> str:
    return format_rank_line(0, format_record(fields))


def test_the_monitor_model_and_the_replayed_history_measure_anew_after_a_resume() -> None:
    from jupyter_ktrain.backends.results import progress_from_logs

    lines = [("n0", _rec(type="metric", step=s, total=60, t=T0 + 0.3 * s)) for s in range(11)]
    back = T0 + 15.3
    lines.append(("n0", _rec(type="resume", step=9, file="step-9.pt", t=back)))
    for s in range(10, 14):
        lines.append(("n0", _rec(type="metric", step=s, total=60, t=back + 0.3 * (s - 9))))
    m = MonitorModel(JobHeader(name="r"))
    for _replica, raw in lines:
        m.feed_text(raw, T0)
    p = m.progress
    assert p is not None
    assert p.eta_s == pytest.approx(46 * 0.3)
    assert progress_from_logs(lines)[-1] == p


def test_a_restart_says_restarting_until_the_new_attempts_rate_is_known_never_flickering() -> None:
    """After a fault the nodes start again (``restarted``); the ranks come up, resume from a
    checkpoint (or start over) and step again. Every moment until the new attempt's time left
    is known says ``restarting``: never a stale countdown, ``waiting`` or ``ETA unknown``
    between (what the views showed: restarting -> 10s left -> waiting -> ETA unknown)."""
    for resumes in (True, False):
        job = JobProgress()
        for step in range(10):
            job.feed(0, Metric(0, T0 + step, step, 20, {"loss": 1.0}), T0)
        assert job.progress is not None
        assert job.progress.describe(T0 + 9.5) == "50% (10/20) · 10s left"
        fault = T0 + 10
        assert job.restarted(fault) is not None
        said = []
        t = fault
        if resumes:  # the ranks load the checkpoint of step 7 at fault + 4 s
            job.feed(0, Resume(step=7, rank=0, t=fault + 4), fault + 4)
        first = 8 if resumes else 0
        steps = [(first + k, fault + 6 + k) for k in range(4)]
        for step, at in steps:
            while t < at:  # what the views say every 0.5 s until the step comes
                p = job.progress
                assert p is not None
                said.append(p.describe(t))
                t += 0.5
            job.feed(0, Metric(0, at, step, 20, {"loss": 1.0}), at)
        p = job.progress
        assert p is not None
        final = p.describe(t)
        words = ["left" if w.endswith(" left") else w.split(" · ")[1] for w in said]
        turn = words.index("left")  # restarting until the rate is known, then the time left
        assert turn > 0, words
        assert words == ["restarting"] * turn + ["left"] * (len(words) - turn), words
        assert final.endswith(" left"), final
        assert progress_short(p, t) != f"{p.percent:g}% · restarting"
        # serialised (state.json), it still says so
        again = Progress.from_dict({**Progress(3, 20, T0, anew=True).to_dict()})
        assert again is not None
        assert again.describe(T0 + 30) == "20% (4/20) · restarting"
