"""Hangs named (jupyter_ktrain.hangs, and the model's ``rank-hung`` alert): who is named,
after how long, with what the stacks say."""

from __future__ import annotations

import time

from jupyter_ktrain.backends.local.supervisor.hangwatch import JobHangs
from jupyter_ktrain.hangs import (
    DEFAULT_HANG_S,
    DEFAULT_START_HANG_S,
    START_FLOOR_S,
    HangWatch,
    hang_in,
    hang_text,
    stack_summary,
    stuck_outside_collectives,
)
from jupyter_ktrain.jobs import JobShape, ReplicaStatus
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.pod.protocol import Stack, format_rank_line, format_record

T0 = 1_763_700_000.0
SITE = "/usr/lib/python3/site-packages"


def _steps(watch: HangWatch, rank: int, first: int, last: int, every: float, t0: float) -> None:
    for step in range(first, last + 1):
        watch.heard(rank, t0 + step * every, step)


def test_the_limit_is_ten_times_the_ranks_median_step_time_and_two_minutes_at_least() -> None:
    watch = HangWatch()
    _steps(watch, 0, 0, 20, 30.0, T0)  # 30 s a step: 300 s allowed
    _steps(watch, 1, 0, 20, 1.0, T0)  # 1 s a step: 2 min allowed
    assert watch.limit(0) == 300.0
    assert watch.limit(1) == 120.0
    assert HangWatch(after=30).limit(0) == 30  # --hang-after
    # a rank that printed once is never "hung"; one that went on is not either
    watch.heard(2, T0)
    _steps(watch, 0, 21, 40, 30.0, T0)
    hang = watch.check(T0 + 20 + 121)
    assert hang is not None
    assert hang.ranks == (1,)
    assert not hang.every
    assert (hang.steps[1], hang.others) == (20, 40)
    assert hang_text(hang, {1: "pod j-worker-0"}) == (
        "rank 1 (pod j-worker-0) has made no progress for 2 min; the others are at step 40, "
        "it is at 20"
    )


def test_when_every_rank_stops_the_ones_behind_are_named() -> None:
    watch = HangWatch(after=10)
    for rank in range(4):
        _steps(watch, rank, 0, 5 if rank != 2 else 4, 1.0, T0)  # rank 2 never reached step 5
    assert watch.check(T0 + 12) is None  # rank 2 has been quiet 8 s, the others 7 s
    hang = watch.check(T0 + 16)
    assert hang is not None
    assert hang.every
    assert hang.ranks == (2,)
    assert hang_text(hang) == (
        "rank 2 has made no progress for 12 s: every rank is stopped; the others reached step 5 "
        "and wait there, it is at step 4"
    )


def _stack(rank: int, *frames: tuple[str, int, str, str]) -> Stack:
    return Stack(rank, 100 + rank, (("MainThread", frames),))


def test_stacks_name_the_rank_outside_the_collective_and_where_it_waits() -> None:
    waiting = [
        _stack(r, ("cell [4]", 31, "train", "dist.all_reduce(t)"),
               (f"{SITE}/torch/distributed/c10d_logger.py", 81, "wrapper", "return func(*a)"),
               (f"{SITE}/torch/distributed/distributed_c10d.py", 2501, "all_reduce", "work.wait()"))
        for r in (0, 1, 3)
    ]  # fmt: skip
    sleeping = _stack(2, ("cell [4]", 29, "train", "time.sleep(600)"))  # sleep is C: no frame
    assert stuck_outside_collectives([*waiting, sleeping]) == [2]
    assert stuck_outside_collectives(waiting) == []
    assert stack_summary(waiting[0]) == "all_reduce <- train (cell [4], line 31)"
    assert stack_summary(sleeping) == "sleep <- train (cell [4], line 29)"
    assert stack_summary(Stack(5, why="no answer in 5 s")) == "no answer in 5 s"


def test_the_model_names_the_hung_rank_with_its_pod_and_its_stack() -> None:
    m = MonitorModel(JobHeader(name="j", backend="kubernetes"), hang_after=30)
    m.set_state("Running", T0)
    m.set_replicas([ReplicaStatus("j-master-0", "Running"), ReplicaStatus("j-worker-0", "Running")])
    for step in range(6):  # both ranks at step 5, then both stop: rank 1 sleeps outside
        for rank in (0, 1):
            rec = format_record({"type": "metric", "step": step, "loss": 1.0})
            m.feed_text(format_rank_line(rank, rec), T0 + step, node=rank)
    assert m.check(T0 + 30) == []
    [alert] = m.check(T0 + 40)
    assert (alert.code, alert.key) == ("rank-hung", "0,1")
    assert "every rank is stopped, all at step 5" in alert.message
    got = [
        ("j-master-0", _stack(0, ("cell [4]", 31, "train", "dist.all_reduce(t)"),
                              (f"{SITE}/torch/distributed/distributed_c10d.py", 2501, "all_reduce",
                               "work.wait()"))),
        ("j-worker-0", _stack(1, ("cell [4]", 29, "train", "time.sleep(600)"))),
    ]  # fmt: skip
    m.hang_stacks(got, T0 + 42)
    [alert] = m.alerts()
    assert alert.key == "1+stacks"
    assert alert.message.splitlines() == [
        "rank 1 (pod j-worker-0) has made no progress for 35 s: every rank is stopped, the "
        "others inside a collective, it is not",
        "rank 1 waits in sleep <- train (cell [4], line 29)",
        "(every rank's whole stack: %ktrain stacks j)",
    ]
    m.feed_text(format_rank_line(1, "awake"), T0 + 50, node=1)
    assert m.alerts() == []  # it moves again


def test_a_rank_stopped_at_the_step_the_others_are_at_is_not_named_alone() -> None:
    """Ranks that stop together at one collective have their last lines read a little apart:
    the first to cross its limit is not "the hung one" while the others are no further on."""
    watch = HangWatch(after=4)
    _steps(watch, 0, 0, 4, 0.2, T0 + 0.5)  # rank 0's lines come 0.5 s later
    _steps(watch, 1, 0, 4, 0.2, T0)
    assert watch.check(T0 + 0.8 + 4.2) is None  # rank 1 crossed, rank 0 not yet: wait
    hang = watch.check(T0 + 1.3 + 4.2)
    assert hang is not None
    assert (hang.ranks, hang.every) == ((0, 1), True)


def _in_all_reduce(rank: int) -> Stack:
    return _stack(rank, ("cell [2]", 7, "train", "dist.all_reduce(t)"),
                  (f"{SITE}/torch/distributed/distributed_c10d.py", 2501, "all_reduce",
                   "work.wait()"))  # fmt: skip


def test_before_any_step_every_rank_quiet_for_the_limit_is_a_hang_of_them_all() -> None:
    """The first collective: rank 1 never reaches it, rank 0 waits in it; neither reported a
    step. Named once every rank of the world (heard from or not) is quiet for the limit, counted
    from the attempt's start or the last line, whichever came later."""
    watch = HangWatch(after=10)
    watch.start(T0, world=3)
    watch.heard(0, T0 + 2)  # "ready" after init_process_group; rank 2 said nothing yet
    watch.heard(1, T0 + 3)
    assert watch.check(T0 + 12.9) is None  # 9.9 s since the last line
    hang = watch.check(T0 + 13.5)
    assert hang is not None
    assert (hang.ranks, hang.every, hang.first, hang.others) == ((0, 1, 2), True, True, None)
    assert hang_text(hang) == (
        "rank 0, rank 1, rank 2 have made no progress for 10 s: every rank is stopped before its "
        "first step (a rendezvous or a first collective that does not complete?)"
    )
    watch.heard(0, T0 + 14, step=0)  # a step: the start-up is over, the usual limits apply
    assert watch.check(T0 + 30) is None
    # a restart starts the clock again; the default is the start-up limit, not 2 min
    watch = HangWatch()
    watch.start(T0, world=2)
    watch.forget(T0 + 100)
    assert watch.check(T0 + 100 + DEFAULT_START_HANG_S - 1) is None
    assert watch.check(T0 + 101 + DEFAULT_START_HANG_S) is not None
    assert DEFAULT_START_HANG_S > DEFAULT_HANG_S
    # one rank waits for no other: quiet is busy, never hung before its first step
    alone = HangWatch(after=1)
    alone.start(T0, world=1)
    assert alone.check(T0 + 60) is None


def test_the_model_names_the_rank_that_never_reached_the_first_collective_and_where_it_is() -> None:
    m = MonitorModel(JobHeader(name="j", shape=JobShape("PyTorchJob", 2, 1)), hang_after=10)
    m.set_state("Running", T0)
    for rank in (0, 1):
        m.feed_text(format_rank_line(rank, "ready"), T0 + 1, node=rank)
    assert m.check(T0 + 10) == []
    [alert] = m.check(T0 + 12)
    assert (alert.code, alert.key) == ("rank-hung", "0,1")
    assert "before its first step" in alert.message
    sleeping = _stack(1, ("cell [2]", 5, "train", "time.sleep(600)"))
    m.hang_stacks([("", _in_all_reduce(0)), ("", sleeping)], T0 + 13)
    [alert] = m.alerts()
    assert alert.message.splitlines() == [
        "rank 1 (node 1) has made no progress for 11 s: every rank is stopped before its first "
        "step, the others inside a collective, it is not",
        "rank 1 waits in sleep <- train (cell [2], line 5)",
        "(every rank's whole stack: %ktrain stacks j)",
    ]


def test_a_rendezvous_that_never_completes_is_named_with_no_rank_to_ask() -> None:
    m = MonitorModel(JobHeader(name="j", shape=JobShape("PyTorchJob", 2, 2)), hang_after=5)
    m.set_state("Running", T0)  # no rank ever printed: torchrun waits for a node
    assert m.check(T0 + START_FLOOR_S - 1) == []  # before any rank printed: a slow start
    [alert] = m.check(T0 + START_FLOOR_S + 1)
    said = f"rank 0, rank 1, rank 2, rank 3 have made no progress for {START_FLOOR_S + 1:.0f} s"
    assert alert.message.startswith(said)
    m.hang_stacks([], T0 + 62)  # no rank has a socket to answer
    [alert] = m.alerts()
    assert alert.message.splitlines()[1:] == [
        "no rank answered: the nodes may wait in torchrun's rendezvous (a node that never "
        "joined, a wrong MASTER_ADDR?)"
    ]


def test_the_supervisors_watch_keeps_what_it_says_without_a_cell() -> None:
    """The local supervisor's watch (followed or not): the hang said at once, then with the
    stacks; forgotten when a named rank moves and at the end."""
    kept: list[dict[str, object] | None] = []
    got = [_in_all_reduce(0), _stack(1, ("cell [2]", 5, "train", "time.sleep(600)"))]
    hangs = JobHangs("j", 4.0, world=2, nproc=1, keep=kept.append, stacks=lambda: got)
    hangs.start(T0, started=T0 - 1)
    hangs.heard(0, None, T0 + 1)
    hangs.check(T0 + 4.5)
    assert kept == [None]  # the start forgets an earlier attempt's; nothing yet
    hangs.check(T0 + 5.5)
    deadline = time.monotonic() + 5
    while len(kept) < 3 and time.monotonic() < deadline:  # the stacks come from a thread
        time.sleep(0.01)
    first, said = kept[1], kept[2]
    assert first is not None
    assert said is not None
    assert str(first["text"]).startswith("rank 0 (node 0), rank 1 (node 1) have made no progress")
    assert said["started"] == T0 - 1
    assert str(said["text"]).splitlines()[:2] == [
        "rank 1 (node 1) has made no progress for 4 s: every rank is stopped before its first "
        "step, the others inside a collective, it is not",
        "rank 1 waits in sleep <- train (cell [2], line 5)",
    ]
    assert str(said["stacks"]).startswith("Stacks of 'j', 2 ranks")
    hangs.heard(1, None, T0 + 6)  # it moves again
    assert kept[-1] is None
    hangs.stop()
    assert kept[-1] is None


def test_a_hang_is_said_from_stored_lines_with_their_times_as_a_watch_would() -> None:
    """What a reader that follows nothing (a detached cluster job's status) says from the lines
    the pods stored: the same hang the live watch names, from the lines' own times, in any
    order; nothing from before the attempt's start (a restarted pod's earlier lines)."""
    t0 = 1000.0
    # rank 0 printed until t0+3 and waits in the first collective; rank 1 printed once
    heard = [(t0 + 3.0, 0, None), (t0 + 1.0, 1, None), (t0 + 2.0, 0, None), (t0 + 1.0, 0, None)]
    hang = hang_in(heard, 8.0, 2, t0, t0 + 12.0)
    assert hang is not None
    assert (hang.first, hang.ranks) == (True, (0, 1))
    assert round(hang.quiet) == 9
    assert hang_in(heard, 8.0, 2, t0, t0 + 10.0) is None  # quiet 7 s: under the limit
    # the same lines, but the attempt started at t0+5: its ranks have not printed yet
    assert hang_in(heard, 8.0, 2, t0 + 5.0, t0 + 12.0) is None
    # steps reported: rank 1 stopped at step 3 while rank 0 went on to step 9
    steps = [(t0 + s, 0, s) for s in range(10)] + [(t0 + s, 1, s) for s in range(4)]
    late = hang_in(steps, 4.0, 2, t0, t0 + 10.0)
    assert late is not None
    assert (late.first, late.ranks) == (False, (1,))
    assert (late.steps[1], late.others) == (3, 9)
