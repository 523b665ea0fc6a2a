"""A warm node: ``python -m jupyter_ktrain.pod.agent.warm``, the agent of a ``--warm`` job.

Where a cold node runs torchrun once and exits, a warm node's agent stays: it imports torch,
``torch._dynamo`` and ``$KTRAIN_WARM_PREIMPORT`` (comma-separated) once (:mod:`.preimport`),
says it is ready (a ``ready`` record), then waits for runs. Each run is an order from the job's
control (:class:`RunOrder`: the run's number and the folder that holds its program); the agent
installs what the run's ``requirements.txt`` pins and the image lacks, then forks one process per
local rank from its ready interpreter (no new interpreter, no torch import: about 0.1 s to the first
line, against seconds for torchrun) and each child runs :func:`jupyter_ktrain.pod.program.main`
with the environment torchrun would give it. Measured with gloo on 2 x 2 ranks: fork 0.1-0.2 s
to an all-reduce done, against ~4 s for the torch import alone. A fork is safe here because this
process never starts a thread (no GPU sampler, no metrics endpoint on a warm node) and never
touches CUDA: each rank initialises CUDA and NCCL itself, after the fork.

A run is framed in the node's stream by a ``run`` record and a ``run_end`` record (the node's
code for the run, and why), so the monitor splits a warm job's logs by run. A run ends on
every rank's exit; when a rank fails with a signal's code, the others of this node get
:data:`FAIL_GRACE_S` to end by themselves (a lost peer reports itself; a rank that raised, a
bug, gets them no grace: they are stopped at once), then SIGTERM, then
SIGKILL after :data:`KILL_AFTER_S` (a hung rank). Each rank leads its own process group, so
whatever it started goes with it. The control can abort a run (a cancel, or another node's
failure): the same stop. After a run nothing of it is left: every rank reaped, its process
group killed, the rendezvous port closed with rank 0.

The control is a seam (:class:`Control`). :class:`FolderControl` reads the job's run folder
(``$KTRAIN_WARM_CONTROL``: ``control.json`` names the run, ``runs/N/abort`` aborts it): the
local backend writes it; on Kubernetes it is filled from the job's code ConfigMap, run 1 from
the pod's mount of it and every later order by the kernel through ``pods/exec``
(:mod:`.mirror`, :mod:`.deliver`). The agent itself reads no API and holds no key: the job's
key (``$KTRAIN_WARM_KEY``) is for the exec'd :mod:`.deliver` only and is dropped from this
process's environment, so no rank sees it. Standard library only, like the whole pod package.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Protocol

from .. import program  # imported once here, not in every rank
from ..exits import EXIT_DIR_ENV, is_bug, node_exit, read_rank_codes
from ..launch import CODE_DIR, PROGRAM_FILE
from ..protocol import READY, RUN, RUN_END, TYPE, format_agent_line, format_record
from ..stacks import STACKS_DIR_ENV, stacks_dir
from .deliver import KEY_ENV
from .mirror import CONFIGMAP_ENV, CONTROL_ENV, seed
from .preimport import preimport

__all__ = [
    "CONTROL_ENV",
    "Control",
    "FolderControl",
    "RunOrder",
    "main",
    "rank_environ",
]

RUN_ENV = "KTRAIN_WARM_RUN"
FAIL_GRACE_S = 1.0
KILL_AFTER_S = 3.0
POLL_S = 0.01
ABORT_POLL_S = 0.05


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()


@dataclass(frozen=True)
class RunOrder:
    """Run ``number`` of the job: its program is ``code_dir/program.py``."""

    number: int
    code_dir: str


class Control(Protocol):
    """Where a warm node's orders come from."""

    def next_run(self, after: int, idle_since: float) -> RunOrder | None:
        """Block until a run newer than ``after`` is ordered; None when the node should stop
        (stopped, or idle since ``idle_since`` for longer than the ordered idle limit)."""
        ...

    def abort_reason(self, run: int) -> str | None:
        """Why run ``run`` is to stop now (``cancelled by the user``), or None."""
        ...


class FolderControl:
    """The run folder: ``FOLDER/control.json`` (``{"run": N, "code_dir": D}``, replaced
    atomically, and on Kubernetes ``"idle_limit_s"``) and ``FOLDER/runs/N/abort`` (its text:
    why). The local backend writes it; on Kubernetes :mod:`.mirror` and :mod:`.deliver`
    write it from the job's ConfigMap. ``stopping`` is asked between polls, so a SIGTERM
    ends the wait."""

    def __init__(self, folder: str, stopping: Callable[[], bool] = lambda: False):
        self.folder = Path(folder)
        self.stopping = stopping
        self.idle_limit: float | None = None  # None: the backend ends an idle job itself
        self._seen: tuple[int, RunOrder | None] = (-1, None)

    def read(self) -> RunOrder | None:
        """The ordered run (re-read only when the file changed)."""
        path = self.folder / "control.json"
        try:
            stamp = path.stat().st_mtime_ns
            if stamp == self._seen[0]:
                return self._seen[1]
            raw = json.loads(path.read_text())
            order = RunOrder(int(raw["run"]), str(raw["code_dir"]))
            limit = raw.get("idle_limit_s")
            self.idle_limit = float(limit) if isinstance(limit, (int, float)) else None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        self._seen = (stamp, order)
        return order

    def next_run(self, after: int, idle_since: float) -> RunOrder | None:
        while not self.stopping():
            order = self.read()
            if order is not None and order.number > after:
                return order
            if self.idle_limit is not None and time.time() - idle_since >= self.idle_limit:
                _say(f"warm: idle for {self.idle_limit:.0f} s (the idle limit): ending")
                return None
            time.sleep(POLL_S)
        return None

    def abort_reason(self, run: int) -> str | None:
        try:
            return (self.folder / "runs" / str(run) / "abort").read_text().strip() or "aborted"
        except OSError:
            return None


def rank_environ(env: Mapping[str, str], local_rank: int, run: int) -> dict[str, str]:
    """What torchrun gives local rank ``local_rank`` of this node, from the node's ``PET_*``
    (the operator's) environment; ranks of node ``K`` are ``K * nproc .. K * nproc + nproc - 1``."""
    nnodes = int(env.get("PET_NNODES", "1"))
    nproc = int(env.get("PET_NPROC_PER_NODE", "1"))
    node = int(env.get("PET_NODE_RANK", "0"))
    rank = node * nproc + local_rank
    out = dict(env)
    out.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "WORLD_SIZE": str(nnodes * nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "GROUP_RANK": str(node),
            "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": str(nnodes * nproc),
            "GROUP_WORLD_SIZE": str(nnodes),
            "MASTER_ADDR": env.get("PET_MASTER_ADDR", env.get("MASTER_ADDR", "127.0.0.1")),
            "MASTER_PORT": env.get("PET_MASTER_PORT", env.get("MASTER_PORT", "29500")),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            RUN_ENV: str(run),
        }
    )
    return out


class WarmNode:
    """The node's loop: wait for a run, run it, report, wait again."""

    def __init__(self, env: Mapping[str, str], control: Control | None = None):
        self.env = dict(env)
        self.node = int(env.get("PET_NODE_RANK", "0"))
        self.nproc = int(env.get("PET_NPROC_PER_NODE", "1"))
        self.stopped: list[int] = []
        self.control = control or FolderControl(env[CONTROL_ENV], self._stopping)

    def _stopping(self) -> bool:
        """A SIGTERM came (the job was deleted: its pods are stopped)."""
        return bool(self.stopped)

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopped.append(signum)

    def serve(self) -> int:
        t0 = time.monotonic()
        names = preimport(self.env)
        took = time.monotonic() - t0
        what = ", ".join(names) or "nothing (no torch here)"
        _say(f"warm: ready, {what} imported in {took:.1f} s; waiting for runs")
        _say(format_record({TYPE: READY, "node": self.node, "s": round(took, 3)}))
        last = self._already_ordered()
        idle_since = time.time()
        while not self.stopped:
            order = self.control.next_run(last, idle_since)
            if order is None:
                break
            last = order.number
            self.run(order)
            idle_since = time.time()
        return 128 + self.stopped[0] if self.stopped else 0

    def _already_ordered(self) -> int:
        """Runs a new agent must not run: all but the first. A node made anew (its pod
        restarted) joins at the next run, never re-running one its peers ran or dropped."""
        current = getattr(self.control, "read", lambda: None)()
        return current.number if current is not None and current.number > 1 else 0

    def run(self, order: RunOrder) -> int:
        n = order.number
        _say(format_record({TYPE: RUN, "run": n, "node": self.node, "t": time.time()}))
        code = self._install(order.code_dir)
        if code != 0:
            why = f"requirements could not be installed (pip exit code {code})"
            return self._end(n, code, why, None)
        exit_dir = tempfile.mkdtemp(prefix="ktrain-exits-")
        pids = {self._fork(order, local, exit_dir): local for local in range(self.nproc)}
        codes, by_rank, aborted = self._wait(n, pids)
        ranks = read_rank_codes(exit_dir)
        with contextlib.suppress(OSError):
            for name in os.listdir(exit_dir):
                os.unlink(os.path.join(exit_dir, name))
            os.rmdir(exit_dir)
        failed = [c for c in codes if c != 0]
        code, why = node_exit(failed[0] if failed else 0, ranks)
        return self._end(n, code, why, aborted, by_rank)

    def _end(
        self, run: int, code: int, why: str, aborted: str | None, ranks: Mapping[int, int] = {}
    ) -> int:
        words = f"run {run} ended with code {code}" + (f": {why}" if why else "")
        if aborted:
            words = f"run {run} stopped ({aborted}); its ranks are gone"
        _say(words)
        record = {TYPE: RUN_END, "run": run, "node": self.node, "code": code, "why": why}
        record["ranks"] = {str(r): c for r, c in sorted(ranks.items())}  # as each process ended
        _say(format_record({**record, "aborted": aborted or "", "t": time.time()}))
        return code

    def _install(self, code_dir: str) -> int:
        from ..install import ensure_requirements, install_lock

        with install_lock():
            return ensure_requirements(code_dir)

    def _fork(self, order: RunOrder, local_rank: int, exit_dir: str) -> int:
        env = rank_environ(self.env, local_rank, order.number)
        env[EXIT_DIR_ENV] = exit_dir
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            with contextlib.suppress(OSError):  # the child does it too: whichever comes first
                os.setpgid(pid, pid)
            return pid
        code = 1
        try:  # the child: never returns into the agent's loop
            os.setpgid(0, 0)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            os.environ.clear()
            os.environ.update(env)
            os.chdir(order.code_dir)
            code = program.main([os.path.join(order.code_dir, PROGRAM_FILE)])
            program.exit_now(code)
        finally:
            os._exit(code)

    def _wait(self, run: int, pids: dict[int, int]) -> tuple[list[int], dict[int, int], str | None]:
        """Reap every rank; stop the rest after a failure's grace, an abort or a SIGTERM.
        The ranks' codes in the order they ended, each global rank's code, and the abort's
        reason."""
        alive = dict(pids)
        codes: list[int] = []
        by_rank: dict[int, int] = {}
        failed_at = stop_at = None
        aborted: str | None = None
        next_check = 0.0
        while alive:
            for pid in list(alive):
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    local = alive.pop(pid)
                    codes.append(_status_code(status))
                    by_rank[self.node * self.nproc + local] = codes[-1]
            now = time.monotonic()
            if failed_at is None and any(codes):
                failed_at = now
            if aborted is None and now >= next_check:
                next_check = now + ABORT_POLL_S
                aborted = self.control.abort_reason(run)
                if aborted is None and self.stopped:
                    aborted = f"the node was stopped ({signal.Signals(self.stopped[0]).name})"
            # a bug gets no grace: it is the cause, whatever its peers do next
            late = failed_at is not None and (
                any(is_bug(c) for c in codes) or now - failed_at > FAIL_GRACE_S
            )
            if stop_at is None and alive and (aborted or late):
                stop_at = now
                _signal_groups(alive, signal.SIGTERM)
            if stop_at is not None and now - stop_at > KILL_AFTER_S:
                _signal_groups(alive, signal.SIGKILL)
            if alive:
                time.sleep(POLL_S)
        _signal_groups(pids, signal.SIGKILL)  # whatever a rank started and left behind
        return codes, by_rank, aborted


def _signal_groups(pids: Mapping[int, int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def _status_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main(argv: list[str] | None = None) -> int:
    if CONTROL_ENV not in os.environ:
        sys.stderr.write(f"jupyter_ktrain.pod.agent.warm: {CONTROL_ENV} is not set\n")
        return 2
    os.environ.pop(KEY_ENV, None)  # for the exec'd deliveries only: no rank sees it
    os.environ[STACKS_DIR_ENV] = stacks_dir(os.environ)  # where its ranks answer `stacks`
    folder = os.environ[CONTROL_ENV]
    os.makedirs(folder, exist_ok=True)
    if os.environ.get(CONFIGMAP_ENV):  # on Kubernetes: run 1 from the mounted ConfigMap
        seed(Path(folder), Path(CODE_DIR))
    node = WarmNode(os.environ)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, node.on_signal)
    return node.serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
