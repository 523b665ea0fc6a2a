"""Which failure is a local job's: the rules its supervisor applies to the exit codes its ranks
and nodes report (pure: times are given). A rank killed by a signal did not choose to fail, and
the ranks that lost it fail a moment later; a bug (codes 1-127) outweighs a lost peer; so the
first failure seen is not always the cause, and these say which is. A bug needs no such wait:
it fails the job at once (:func:`~jupyter_ktrain.pod.exits.is_bug`), and the nodes stopped for it
read as what their ranks said (:func:`~jupyter_ktrain.pod.exits.stopped_node_exit`, the rule a
pod's agent applies too)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ....failures import WorkerExit, signal_text
from ....pod.exits import PEER_LOST, describe_exit, retryable
from ..procs import NodeKill

__all__ = [
    "GRACE_AFTER_FAILURE_S",
    "Bug",
    "cause_node",
    "cause_rank",
    "first_cause",
    "killed_rank",
    "out_of_restarts",
    "outweighs",
    "rank_codes",
    "weight",
]

GRACE_AFTER_FAILURE_S = 5.0

First = tuple[float, int] | None  # (when, rank) of the job's first failure so far


def rank_codes(exit_codes: Mapping[int, int], node: int, nproc: int) -> list[int | None]:
    """The exit codes node ``node``'s ranks reported so far (None: not yet)."""
    return [exit_codes.get(r) for r in range(node * nproc, (node + 1) * nproc)]


@dataclass(frozen=True)
class Bug:
    """The bug that fails a job at once: when its supervisor learnt of it (``at``, its
    monotonic clock), the node, the exit code, and the rank whose own exit record said it
    (None when only the node's exit code did)."""

    at: float
    node: int
    code: int
    rank: int | None = None

    def stop_line(self) -> str:
        """What a node stopped for it says at the end of its log."""
        who = f"node {self.node}" if self.rank is None else f"rank {self.rank} (node {self.node})"
        return f"{who} failed with exit code {self.code}, a bug: the job fails at once; stopped"

    def stop_why(self) -> str:
        """Why the other nodes were stopped, as each says it in its last line."""
        who = f"node {self.node}" if self.rank is None else f"rank {self.rank} (node {self.node})"
        return f"{who} failed with exit code {self.code}, a bug: not restarted (the job failed)"

    def stopped_event(self, code: int) -> str:
        """What another node stopped for it last did, as the replica tables say it (``code``:
        its exit code as :func:`stopped_node_exit` reads it)."""
        if code == 0:
            return f"its ranks had finished; stopped after node {self.node} failed"
        return f"stopped after node {self.node} failed"


def weight(code: int | None) -> int:
    """How surely an exit code is the cause of a job's failure: 2 for a bug or a kill, 1 for a
    lost peer or a SIGTERM (how the others are stopped), 0 for none."""
    if not code:
        return 0
    return 1 if code == PEER_LOST else 2


def outweighs(code: int, first: First, exit_codes: Mapping[int, int], now: float) -> bool:
    """Whether a rank's own exit record with ``code`` is the job's first failure. A rank that
    lost a peer (143) reports at once, and the rank whose bug broke the collective may report a
    moment later, from another node: within the grace period a bug (or a kill) is the cause,
    not the lost peer."""
    return code != 0 and (
        first is None
        or (
            weight(code) > weight(exit_codes.get(first[1]))
            and now - first[0] <= GRACE_AFTER_FAILURE_S
        )
    )


def first_cause(ended: WorkerExit, first: First, exit_codes: Mapping[int, int], now: float) -> bool:
    """Whether an entry of torchrun's failure report is the job's first failure. A rank killed
    by a signal did not choose to fail: the ranks that lost it fail a moment later (a lost peer,
    143, or 1 when its error was not recognised) and report before torchrun does, and torchrun's
    own "Root Cause" is often one of them. So within the grace period a killed rank is the
    cause; 143 (SIGTERM, or a lost peer) only when torchrun calls it the root and nothing failed
    before (torchrun sends SIGTERM itself to stop a failed node's ranks)."""
    if ended.code == 0:
        return False
    killed = signal_text(ended.code) is not None and ended.code != PEER_LOST
    if first is None:
        return killed or ended.root
    at, rank = first
    code = exit_codes.get(rank)
    first_killed = signal_text(code) is not None and code != PEER_LOST
    return killed and not first_killed and now - at <= GRACE_AFTER_FAILURE_S


def cause_node(
    codes: Sequence[int],
    ended: Sequence[int],
    exit_codes: Mapping[int, int],
    first: First,
    nproc: int,
) -> int:
    """The failing node that caused the others' end (``codes``: each node's exit code,
    ``ended``: the failed nodes in the order seen): the node of a rank killed by a signal (not
    SIGTERM: that is how the others are stopped), else the first node seen failing with another
    code than a lost peer's, else the first seen failing."""
    first_rank = first[1] if first is not None else None
    for rank in sorted(exit_codes, key=lambda r: (r != first_rank, r)):
        code, node = exit_codes[rank], rank // nproc
        killed = code != PEER_LOST and retryable(code)
        if killed and node < len(codes) and codes[node]:
            return node
    failed = [n for n in ended if codes[n]] or [n for n, c in enumerate(codes) if c]
    return next((n for n in failed if codes[n] != PEER_LOST), failed[0])


def cause_rank(node: int, exit_codes: Mapping[int, int], first: First, nproc: int) -> str:
    """``rank 3 killed by signal 9 (SIGKILL)``: the rank of ``node`` that a signal killed
    (the first failing rank first), else the first failing rank there that lost a peer."""
    mine = {r: c for r, c in exit_codes.items() if r // nproc == node and c}
    first_rank = first[1] if first is not None else None
    order = sorted(mine, key=lambda r: (r != first_rank, r))
    for rank in order:
        if mine[rank] != PEER_LOST and signal_text(mine[rank]):
            return f"rank {rank} killed by {signal_text(mine[rank])}"
    return next((f"rank {r} lost a peer" for r in order if mine[r] == PEER_LOST), "")


def killed_rank(
    first: First,
    reaped: Mapping[int, NodeKill],
    codes: Sequence[int],
    exit_codes: Mapping[int, int],
) -> str:
    """``rank 2 was killed by signal 9 (SIGKILL)`` when a signal ended the first failure;
    ``node 1 exited 137 (killed by signal 9 (SIGKILL)); its ranks 2 and 3 were killed with
    it`` when the rank died with its node (``reaped``: what was left of each ended node,
    ``codes``: each node's exit code); "" otherwise."""
    if first is None:
        return ""
    rank = first[1]
    for node, gone in reaped.items():
        if rank in gone.ranks:
            code = codes[node]
            return f"node {node} exited {code} ({describe_exit(code)}); {gone.ranks_killed()}"
    how = signal_text(exit_codes.get(rank))
    return f"rank {rank} was killed by {how}" if how else ""


def out_of_restarts(done: int, limit: int) -> str:
    """Why a fault failed the job: its restarts ran out (or none were allowed)."""
    if limit == 0:
        return "a fault, and --max-restarts 0 allows no restart"
    times = "time" if done == 1 else "times"
    return f"a fault, and the restarts ran out (restarted {done} {times}, --max-restarts {limit})"
