"""Which failure is a local job's (:mod:`jupyter_ktrain.backends.local.supervisor.causes`): the
rules its supervisor applies to the exit codes its ranks and nodes report, tried without
processes."""

from __future__ import annotations

from jupyter_ktrain.backends.local.procs import NodeKill
from jupyter_ktrain.backends.local.supervisor.causes import (
    GRACE_AFTER_FAILURE_S,
    Bug,
    cause_node,
    cause_rank,
    first_cause,
    killed_rank,
    out_of_restarts,
    outweighs,
    rank_codes,
)
from jupyter_ktrain.backends.local.supervisor.nodes import restart_backoff
from jupyter_ktrain.failures import WorkerExit
from jupyter_ktrain.pod.exits import is_bug, stopped_node_exit


def test_a_bug_reported_within_the_grace_period_outweighs_a_lost_peer() -> None:
    lost = {0: 143}
    assert outweighs(143, None, {}, 10.0)  # the first failure, whatever it is
    assert outweighs(1, (10.0, 0), lost, 10.0 + GRACE_AFTER_FAILURE_S / 2)
    assert not outweighs(1, (10.0, 0), lost, 10.0 + GRACE_AFTER_FAILURE_S + 1)
    assert not outweighs(143, (10.0, 0), {0: 1}, 10.5)  # a lost peer never outweighs a bug
    assert not outweighs(0, None, {}, 10.0)  # success is no failure


def test_a_rank_a_signal_killed_is_the_cause_not_the_ranks_that_lost_it() -> None:
    killed = WorkerExit(3, 137, root=False)
    assert first_cause(killed, None, {}, 1.0)
    assert first_cause(killed, (1.0, 0), {0: 143}, 2.0)  # 143 reported first: a lost peer
    assert not first_cause(killed, (1.0, 0), {0: 137}, 2.0)  # the first was killed too
    assert not first_cause(WorkerExit(0, 143, root=False), None, {}, 1.0)
    assert first_cause(WorkerExit(0, 143, root=True), None, {}, 1.0)  # torchrun's root cause


def test_the_cause_node_and_rank_of_a_fault() -> None:
    # 2 nodes x 2 processes: rank 3 (node 1) killed by SIGKILL, rank 0 (node 0) lost its peer
    codes, exit_codes = [143, 137], {0: 143, 3: 137}
    assert cause_node(codes, [0, 1], exit_codes, (1.0, 0), nproc=2) == 1
    assert cause_rank(1, exit_codes, (1.0, 0), nproc=2) == "rank 3 killed by signal 9 (SIGKILL)"
    assert cause_rank(0, exit_codes, (1.0, 0), nproc=2) == "rank 0 lost a peer"
    assert cause_node([143, 1], [0, 1], {}, None, nproc=2) == 1  # not the lost peer's node


def test_why_no_restart_was_left() -> None:
    assert out_of_restarts(0, 0) == "a fault, and --max-restarts 0 allows no restart"
    assert out_of_restarts(1, 1) == (
        "a fault, and the restarts ran out (restarted 1 time, --max-restarts 1)"
    )


def test_a_bug_is_a_code_below_128() -> None:
    assert [is_bug(c) for c in (None, 0, 1, 3, 127, 128, 137, 143)] == [
        False, False, True, True, True, False, False, False,
    ]  # fmt: skip


def test_a_node_stopped_after_a_bug_reads_as_its_ranks_ended() -> None:
    # 2 nodes x 2 processes; node 0 killed by the stop (137) after both its ranks finished
    codes = {0: 0, 1: 0, 3: 1}
    assert rank_codes(codes, 0, nproc=2) == [0, 0]
    assert rank_codes(codes, 1, nproc=2) == [None, 1]
    assert stopped_node_exit(137, [0, 0]) == 0  # finished: not killed
    assert stopped_node_exit(143, [0, 0]) == 0
    assert stopped_node_exit(137, [143, 1]) == 1  # the bug's own node: the bug's code
    assert stopped_node_exit(137, [0, None]) == 137  # a rank still ran: it was killed
    assert stopped_node_exit(1, [0, 0]) == 1  # it ended by itself: its own code stands
    assert stopped_node_exit(137, []) == 137
    bug = Bug(10.0, node=1, code=1, rank=3)
    assert bug.stopped_event(0) == "its ranks had finished; stopped after node 1 failed"
    assert bug.stopped_event(137) == "stopped after node 1 failed"
    assert bug.stop_line() == (
        "rank 3 (node 1) failed with exit code 1, a bug: the job fails at once; stopped"
    )
    assert Bug(10.0, node=1, code=2).stop_line().startswith("node 1 failed with exit code 2")


def test_the_killed_rank_is_said_with_its_signal_or_its_node() -> None:
    assert killed_rank(None, {}, [0, 137], {}) == ""
    assert killed_rank((1.0, 2), {}, [0, 137], {2: 137}) == (
        "rank 2 was killed by signal 9 (SIGKILL)"
    )
    gone = {1: NodeKill(killed=2, ranks=(2, 3))}
    assert killed_rank((1.0, 2), gone, [0, 137], {2: 137}) == (
        "node 1 exited 137 (killed by signal 9 (SIGKILL)); its ranks 2 and 3 were killed with it"
    )
    assert killed_rank((1.0, 1), {}, [0, 1], {1: 1}) == ""  # a bug: its headline says it


def test_the_first_restart_is_at_once_and_later_ones_back_off() -> None:
    """A killed rank comes back as soon as its nodes are stopped; a fault that repeats waits
    1 s, then 2 s, then 4 s (the plan's base delay, doubling)."""
    assert [restart_backoff(n, 1.0) for n in (1, 2, 3, 4)] == [0.0, 1.0, 2.0, 4.0]
    assert restart_backoff(2, 0.5) == 0.5
