"""Which failure is a local job's (:mod:`jupyter_ktrain.backends.local.causes`): the rules its
supervisor applies to the exit codes its ranks and nodes report, tried without processes."""

from __future__ import annotations

from jupyter_ktrain.backends.local.causes import (
    GRACE_AFTER_FAILURE_S,
    cause_node,
    cause_rank,
    first_cause,
    out_of_restarts,
    outweighs,
)
from jupyter_ktrain.failures import WorkerExit


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
