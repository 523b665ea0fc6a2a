"""One live truth worded once: progress that counts steps done, an ETA that says "restarting"
or "waiting" instead of "0s left", warm jobs as what they are, one copy of a line several
ranks printed, tqdm's last frame under its rank, and the log notice only when lines left."""

from __future__ import annotations

from jupyter_ktrain import words
from jupyter_ktrain.jobs import JobShape, JobStatus, ReplicaStatus, WarmInfo
from jupyter_ktrain.monitor.fold import RepeatFold, shown_text
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.monitor.text import TextView
from jupyter_ktrain.pod.progress import ProgressTracker
from jupyter_ktrain.pod.protocol import format_rank_line

T0 = 1_795_000_000.0


def _run(steps: int, total: int, step_s: float = 1.0) -> ProgressTracker:
    tracker = ProgressTracker()
    for step in range(steps):
        tracker.update(step, total, T0 + step_s * step)
    return tracker


def test_a_run_reporting_steps_0_to_59_of_60_ends_at_100_percent() -> None:
    p = _run(60, 60).progress
    assert p is not None
    assert (p.steps_done, p.percent, p.done, p.head()) == (60, 100.0, True, "100% (60/60)")
    assert _run(59, 60).progress.head() == "98.3% (59/60)"  # type: ignore[union-attr]


def test_the_eta_never_says_0s_left_with_steps_to_go_and_says_waiting_when_none_come() -> None:
    p = _run(58, 60).progress  # steps 0..57: two to go at 1 s a step
    assert p is not None
    assert p.describe(p.t + 1.5) == "96.6% (58/60) · 1s left"  # late, never "0s left"
    assert p.describe(p.t + 10) == "96.6% (58/60) · waiting (no step for 10s)"
    running = JobStatus("j", "Running", progress=p)
    assert words.progress_words(running, p.t + 10) == (
        "96.6% (58/60) · waiting (no step for 10s)",
        "96.6% · waiting",
    )


def test_a_restarting_job_says_restarting_in_every_word_of_its_progress() -> None:
    p = _run(30, 60).progress
    assert p is not None
    down = (
        ReplicaStatus("j-node-0", "Running"),
        ReplicaStatus("j-node-1", "Failed", exit_code=137),
    )
    for status in (
        JobStatus("j", "Running", "Restarting", "restart 1 of at most 3", progress=p),
        JobStatus("j", "Running", replicas=down, progress=p),
    ):
        assert words.restarting(status)
        assert words.progress_words(status, p.t + 0.5) == (
            "50% (30/60) · restarting",
            "50% · restarting",
        )
    ended = JobStatus("j", "Succeeded", progress=_run(60, 60).progress)
    assert not words.restarting(ended)
    assert words.progress_words(ended, T0 + 99) == ("100% (60/60)", "100%")


def test_warm_jobs_say_their_runs_and_stop_counting_once_ended() -> None:
    warm = WarmInfo(runs=2, active=None, idle_since=T0, idle_limit_s=900.0)
    idle = JobStatus("w", "Running", warm=warm)
    assert words.warm_words(idle, T0 + 31) == "warm · 2 runs · idle 31s"
    busy = JobStatus("w", "Running", warm=WarmInfo(runs=3, active=3))
    assert words.warm_words(busy, T0) == "run 3 of a live job"
    ended = JobStatus("w", "Cancelled", "CancelledByUser", warm=warm)
    assert words.warm_words(ended, T0 + 31) == words.warm_words(ended, T0 + 600)
    assert words.warm_words(ended, T0 + 31) == "ended after 2 runs"
    assert words.ended_by_user(ended)
    assert not words.ended_by_user(JobStatus("j", "Cancelled"))  # a plain job's cancel
    assert words.warm_words(JobStatus("j", "Running"), T0) == ""


def test_a_warm_runs_nodes_stay_up_instead_of_reading_succeeded() -> None:
    node = ReplicaStatus("w-node-0", "Succeeded", exit_code=0)
    (row,) = words.replica_rows(JobStatus("w", "Succeeded", replicas=(node,)), run=2)
    assert (row.phase, row.last_event) == ("warm", "run 2 done; the node stays up for the next run")
    (plain,) = words.replica_rows(JobStatus("j", "Succeeded", replicas=(node,)))
    assert (plain.phase, plain.last_event) == ("Succeeded", "exited with code 0")
    failed = ReplicaStatus("w-node-1", "Failed", exit_code=1)
    (bad,) = words.replica_rows(JobStatus("w", "Failed", replicas=(failed,)), run=2)
    assert bad.phase == "Failed"  # a failed run's node says so


def test_a_line_both_ranks_printed_is_shown_once_in_the_all_ranks_view() -> None:
    fold = RepeatFold()
    line = "{'loss': 0.52, 'grad_norm': 1.3, 'epoch': 0.5}"
    assert not fold.repeat(0, line, T0)
    assert fold.repeat(2, line, T0 + 0.2)  # node 1's local rank 0: the same record
    assert not fold.repeat(0, line, T0 + 30)  # the same text much later: a new line
    assert not fold.repeat(1, "step 3 done", T0)  # any other line is every rank's own
    assert not fold.repeat(2, "step 3 done", T0)
    m = MonitorModel(JobHeader(name="hf", shape=JobShape(nodes=2, procs_per_node=2)))
    m.feed_text(format_rank_line(0, line), T0)
    m.feed_text(format_rank_line(2, line), T0 + 0.1)
    assert [e.text for e in m.logs] == [line]
    assert [e.text for e in m.rank_logs["rank2"]] == [line]  # rank 2's own view keeps it


def test_tqdm_lines_keep_their_rank_and_show_their_last_frame() -> None:
    bar = "Writing model shards:   0%|   | 0/2\rWriting model shards: 100%|███| 2/2\r"
    assert shown_text(bar) == "Writing model shards: 100%|███| 2/2"
    assert shown_text("plain") == "plain"
    m = MonitorModel(JobHeader(name="hf"))
    m.feed_text(format_rank_line(0, bar), T0)
    (entry,) = m.logs
    assert (entry.label, entry.text) == ("rank0", "Writing model shards: 100%|███| 2/2")


def test_the_log_notice_comes_only_when_lines_really_left_the_view() -> None:
    import io

    m = MonitorModel(JobHeader(name="hf", shape=JobShape(nodes=2, procs_per_node=2)), max_lines=5)
    out = io.StringIO()
    view = TextView(m, out, clock=lambda: T0)
    view.show()
    line = "{'loss': 0.5}"
    for i in range(4):  # folded repeats leave gaps in the numbers: nothing left the view
        m.feed_text(format_rank_line(0, f"{line[:-1]}{i}}}"), T0 + i)
        m.feed_text(format_rank_line(2, f"{line[:-1]}{i}}}"), T0 + i)
        view.update(T0 + i)
    assert m.left_after(0) == 0
    assert "older lines left the view" not in out.getvalue()
    for i in range(12):  # 12 lines at once into a view of 5: 7 left before it was drawn
        m.feed_text(format_rank_line(1, f"line {i}"), T0 + 10)
    view.update(T0 + 10)
    assert out.getvalue().count("older lines left the view; they are in the log files") == 1


def test_a_progress_bars_first_frame_is_a_line_of_its_own_not_glued_to_the_next_line() -> None:
    """What a rank writes, read as it came (one read per write): tqdm's first frame (no
    newline), then a logger's line on the same stream. The rank's prefixer makes the frame a
    line of its own, so every view shows the bar under ``[rank0]`` and the logger's line
    apart (they showed ``0/40 [00:00<?, ?it/s][transformers] ...`` as one line)."""
    from jupyter_ktrain.pod.program import _split

    reads = [b"\r  0%|          | 0/40 [00:00<?, ?it/s]", b"[transformers] loading weights\n"]
    reads += [b"\r 50%|#####     | 20/40", b"\r100%|##########| 40/40", b"\n", b"done\n"]
    lines: list[bytes] = []
    pending = b""
    for chunk in reads:
        got, pending = _split(pending, chunk)
        lines += got
    assert pending == b""
    assert [shown_text(x.decode()) for x in lines] == [
        "  0%|          | 0/40 [00:00<?, ?it/s]",
        "[transformers] loading weights",
        "100%|##########| 40/40",
        "done",
    ]
