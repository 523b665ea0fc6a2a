"""Exit codes that tell a bug from a fault, so only faults are retried. Pure; standard library.

The Training Operator's ``ExitCode`` restart policy (our default) restarts a replica whose
container exits with a code >= 128 (killed by a signal: the OOM killer, a preemption, a deleted
pod) and fails the job at once on any other non-zero code. The local supervisor applies the
same rule. So the runtime and the agent keep to it:

- a rank whose code raised exits 1: a bug fails the job once (retrying would raise again);
- a rank whose collective broke because another rank or pod died (a peer lost) exits
  :data:`PEER_LOST` (143, "terminated"): the fault is elsewhere, and a restart can rejoin;
- a node one of whose ranks vanished without an exit record (SIGKILL, OOM) exits
  :data:`KILLED` (137);
- a node stopped because another node failed with a bug (``jupyter_ktrain.pod.agent.peers``)
  exits :data:`PEER_FAILED` (3): the job has failed, and restarting the node would only wait
  for a rendezvous that never comes.

Every rank leaves its code in ``$KTRAIN_EXIT_DIR/rank-N`` when that is set (the agent sets it
for the ranks it starts), and :func:`node_exit` turns the ranks' codes into the node's.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping, Sequence

__all__ = [
    "EXIT_DIR_ENV",
    "KILLED",
    "NOT_RESTARTED",
    "PEER_FAILED",
    "PEER_LOST",
    "STOP_WHY_ENV",
    "describe_exit",
    "is_bug",
    "node_exit",
    "peer_lost",
    "peer_lost_words",
    "read_rank_codes",
    "restart_cause",
    "retryable",
    "stopped_node_exit",
    "write_rank_code",
]

EXIT_DIR_ENV = "KTRAIN_EXIT_DIR"
# a file where whoever stops a node (the local supervisor, after another node's bug) writes why
# before its SIGTERM: the node's last line says that, not "stopped from outside: restartable"
STOP_WHY_ENV = "KTRAIN_STOP_WHY"
KILLED = 128 + signal.SIGKILL  # 137
PEER_LOST = 128 + signal.SIGTERM  # 143
PEER_FAILED = 3
# why a node whose rank failed with its own error is not started again (node agents, launchers)
NOT_RESTARTED = "not restarted (a bug fails again)"

# torch.distributed's own classes for a broken peer (DistBackendError is also raised for NCCL
# misuse, a bug: it is judged by its message below, not by its class)
_PEER_CLASSES = {"DistNetworkError", "DistStoreError"}
_PEER_TEXT = re.compile(
    r"Connection (closed|reset) by peer|Broken pipe|Socket closed|Connection refused"
    r"|remote process exited or there was a network error|ncclRemoteError"
    r"|NCCL communicator was aborted|failed to recv, got 0 bytes|Gloo.*(EOF|closed)"
)


def retryable(code: int) -> bool:
    """Whether a replica's exit code is a fault to restart (the operator's ExitCode rule)."""
    return code >= 128


def is_bug(code: int | None) -> bool:
    """Whether an exit code (a rank's own, or a node's) is a bug: 1-127, the program's own
    error. A bug fails the job at once: no grace (it is the cause whatever comes next), no
    restart (it fails again). A code >= 128 is a fault (a signal, a lost peer)."""
    return code is not None and code > 0 and not retryable(code)


def stopped_node_exit(code: int, ranks: Sequence[int | None]) -> int:
    """The exit code a node stopped from outside (its supervisor, after a bug elsewhere; its
    pod deleted as the job ended) reads as
    (``code``: its own; ``ranks``: its ranks' codes, None for one that never said): killed by
    the stop (>= 128) after every rank of it had ended, it reads as its ranks did (a bug's code
    first, else any other, else 0: they had finished, none of them was killed); otherwise its
    own code stands."""
    said = [c for c in ranks if c is not None]
    if not retryable(code) or not said or len(said) < len(ranks):
        return code
    bugs = [c for c in said if is_bug(c)]
    return bugs[0] if bugs else next((c for c in said if c), 0)


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a broken connection to another rank."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if {c.__name__ for c in type(e).__mro__} & _PEER_CLASSES:
            return True
        if _PEER_TEXT.search(str(e)):
            return True
        todo += [e.__cause__, e.__context__]
    return False


def peer_lost_words(text: str) -> str:
    """What a lost peer's error says, in a few words: ``gloo: Connection reset by peer``; ""
    when ``text`` says none of it."""
    m = _PEER_TEXT.search(text)
    if m is None:
        return ""
    lower = text.lower()
    transport = "gloo" if "gloo" in lower else "NCCL" if "nccl" in lower else ""
    return f"{transport}: {m.group(0)}" if transport else m.group(0)


def write_rank_code(rank: int, code: int | None, env: Mapping[str, str] = os.environ) -> None:
    """Leave ``code`` for the agent (``None``: the rank has started); best effort, a full disk
    must not change the verdict."""
    folder = env.get(EXIT_DIR_ENV)
    if not folder:
        return
    try:
        with open(os.path.join(folder, f"rank-{rank}"), "w") as fh:
            fh.write("" if code is None else str(code))
    except OSError:
        pass


def read_rank_codes(folder: str) -> dict[int, int | None]:
    """rank -> its exit code, or None for a rank that started and left no code (killed)."""
    out: dict[int, int | None] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return out
    for name in names:
        rank = name.removeprefix("rank-")
        try:
            with open(os.path.join(folder, name)) as fh:
                text = fh.read().strip()
            out[int(rank)] = int(text) if text else None
        except (OSError, ValueError):
            continue
    return out


def describe_exit(code: int) -> str:
    """``137`` -> ``"killed by signal 9 (SIGKILL)"``; ``1`` -> ``"exit code 1"``."""
    if code >= 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            return f"exit code {code}"
        return f"killed by signal {code - 128} ({name})"
    return f"exit code {code}"


def restart_cause(exit_code: int | None, reason: str = "") -> str:
    """Why a replica's previous instance ended: ``exit 137, killed by signal 9 (SIGKILL)``
    (a pod's container, or a local node); ``reason`` is the kubelet's (``OOMKilled``), or
    ``deleted`` for a pod deleted while it ran."""
    if exit_code is None:
        return "its pod was deleted while it ran" if reason == "deleted" else reason
    why = describe_exit(exit_code)
    text = f"exit {exit_code}" + (f", {why}" if exit_code >= 128 else "")
    return f"{text} ({reason})" if reason and reason not in ("Error", "Completed") else text


def node_exit(child_code: int, ranks: Mapping[int, int | None]) -> tuple[int, str]:
    """The node's exit code from its launcher's (``child_code``, negative when a signal ended
    it) and its ranks' recorded codes (None: started, no code), with one sentence on why. With
    no rank records at all (the ranks never started) the launcher's own code stands."""
    if child_code == 0:
        return 0, ""
    if child_code < 0:
        code = 128 - child_code
        return code, f"the node command was {describe_exit(code)}; the replica may be restarted"
    bugs = sorted((r, c) for r, c in ranks.items() if c is not None and 0 < c < 128)
    if bugs:
        rank, code = bugs[0]
        return code, f"rank {rank} failed with exit code {code}: {NOT_RESTARTED}"
    if child_code >= 128:
        return child_code, f"the node command was {describe_exit(child_code)}: restartable"
    vanished = sorted(r for r, c in ranks.items() if c is None)
    if vanished:
        return KILLED, f"rank {vanished[0]} was killed (no exit code: SIGKILL, OOM): restartable"
    lost = sorted(r for r, c in ranks.items() if c == PEER_LOST)
    if lost:
        return PEER_LOST, f"rank {lost[0]} lost a peer (another rank or pod died): restartable"
    return child_code, ""
