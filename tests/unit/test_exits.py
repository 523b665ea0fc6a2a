"""A bug fails a replica with a code < 128 (not retried); a fault with one >= 128 (retried):
the pure rule, then the real agent running real torchrun ranks that raise or get kill -9."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from jupyter_ktrain.backends.local.joblog import say_stop_why
from jupyter_ktrain.backends.local.supervisor.causes import Bug
from jupyter_ktrain.pod.agent.runner import _verdict
from jupyter_ktrain.pod.exits import (
    EXIT_DIR_ENV,
    KILLED,
    PEER_LOST,
    STOP_WHY_ENV,
    describe_exit,
    node_exit,
    peer_lost,
    restart_cause,
    write_rank_code,
)


def test_a_raising_rank_decides_over_ranks_that_torchrun_stopped() -> None:
    assert node_exit(1, {0: None, 1: 1}) == (
        1,
        "rank 1 failed with exit code 1: not restarted (a bug fails again)",
    )


def test_a_rank_without_a_code_was_killed_and_the_node_is_restartable() -> None:
    code, why = node_exit(1, {0: None, 1: None})
    assert code == KILLED
    assert "rank 0 was killed" in why


def test_a_lost_peer_is_restartable_and_the_launchers_own_signal_stands() -> None:
    assert node_exit(1, {0: PEER_LOST, 1: 0})[0] == PEER_LOST
    assert node_exit(-15, {0: 1})[0] == 143
    assert node_exit(0, {0: 0}) == (0, "")
    assert node_exit(7, {}) == (7, "")  # no rank ever started: the command's own code


def test_broken_connections_are_peers_lost_and_other_errors_are_bugs() -> None:
    inner = ConnectionResetError("[../gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    outer = RuntimeError("allreduce failed")
    outer.__cause__ = inner
    assert peer_lost(outer)
    assert not peer_lost(ValueError("rank 1 raised"))
    assert describe_exit(137) == "killed by signal 9 (SIGKILL)"
    assert describe_exit(1) == "exit code 1"


def test_a_restart_says_how_the_replica_ended_before() -> None:
    """One wording for a pod (the kubelet's reason) and a local node (no reason)."""
    assert restart_cause(137) == "exit 137, killed by signal 9 (SIGKILL)"
    assert restart_cause(137, "OOMKilled") == "exit 137, killed by signal 9 (SIGKILL) (OOMKilled)"
    assert restart_cause(143, "Error") == "exit 143, killed by signal 15 (SIGTERM)"
    assert restart_cause(None, "deleted") == "its pod was deleted while it ran"


# -- an MPIJob launcher's mpirun: run again after a fault, never after a bug ----------------


def test_a_node_stopped_from_outside_after_its_ranks_finished_reads_as_finished(
    tmp_path: Path,
) -> None:
    """A worker whose pod is deleted as the master's success ends the job (cleanPodPolicy
    Running) while it tears down: its ranks had all said 0, so the replica exits 0, not 143;
    one with a rank still running was stopped (restartable); a bug stays the bug."""

    def node(*codes: int | None) -> str:
        folder = tmp_path / f"exits-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        for rank, code in enumerate(codes):
            write_rank_code(rank, code, {EXIT_DIR_ENV: str(folder)})
        return str(folder)

    sigterm = [signal.SIGTERM]
    assert _verdict(-signal.SIGTERM, node(0, 0), sigterm)[0] == 0
    assert _verdict(143, node(0, 0), sigterm) == (
        0,
        "stopped from outside after its ranks had all finished (exit 0)",
    )
    code, why = _verdict(-signal.SIGTERM, node(0, None), sigterm)
    assert code == 143
    assert "stopped from outside by SIGTERM" in why
    assert _verdict(143, node(1, 0), sigterm)[0] == 1  # its own rank's bug
    assert _verdict(-signal.SIGTERM, node(), sigterm)[0] == 143  # no rank had started
    assert _verdict(0, node(0), [])[0] == 0


def test_a_node_stopped_for_another_nodes_bug_says_so_not_stopped_from_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local supervisor stops the other nodes after a bug: it writes why first, and the
    stopped node's last line says that (not a pod deleted, preempted or evicted: restartable)."""
    exits = tmp_path / "exits"
    exits.mkdir()
    write_rank_code(0, None, {EXIT_DIR_ENV: str(exits)})
    why = tmp_path / "stop-why"
    monkeypatch.setenv(STOP_WHY_ENV, str(why))
    say_stop_why({STOP_WHY_ENV: str(why)}, Bug(1.0, node=0, code=1, rank=0).stop_why())
    code, said = _verdict(-signal.SIGTERM, str(exits), [signal.SIGTERM])
    assert code == 143
    assert said == (
        "stopped by SIGTERM: rank 0 (node 0) failed with exit code 1, a bug: not restarted (the "
        "job failed)"
    )
    say_stop_why({STOP_WHY_ENV: str(why)}, None)  # the next attempt: nothing said yet
    exits.mkdir()
    write_rank_code(0, None, {EXIT_DIR_ENV: str(exits)})
    assert "stopped from outside by SIGTERM" in _verdict(143, str(exits), [signal.SIGTERM])[1]
