"""The supervisor of a local job (:class:`Supervisor`): owns one local job.

Started detached (its own session) by the local backend (:mod:`.daemon`), so the job outlives
the kernel. It
starts one node command per node from ``plan.json``, copies each node's output to
``node-K.log`` (like a pod log) and each rank's lines to ``rank-R.log``, keeps ``state.json``
current (with the job's progress from records that carry a ``total``, at most once a second),
and on SIGTERM (cancel) stops every process of the job. Like the Training Operator's ``ExitCode``
policy (:mod:`jupyter_ktrain.pod.exits`), a bug (a rank's or a node's code 1-127) fails the job
at once: the other nodes are stopped the moment it is read, what is left is killed
:data:`BUG_STOP_S` later, and a node whose ranks had finished reads as finished. After a fault
(codes >= 128: a rank killed, OOM, a lost peer) the other nodes get a short grace period, then
are stopped (surviving ranks would block in a collective until a timeout), and every node starts
again, up to ``max_restarts`` times (``plan.json``): the survivors of a static torchrun
rendezvous cannot take one new node in. Each restart is counted per node in ``state.json`` with
its cause and said in every node's log; logs are appended to, so earlier attempts' lines stay.

A node dies whole, as a container does: the moment a node's first process (its agent) ends,
whatever is left of the node (torchrun, its ranks: each node's processes carry a marker of
their own, :func:`.procs.kill_node`) is killed with SIGKILL, and the node's log says how many.
Ranks of a dead node must not train on (and write checkpoints) with the other nodes.

Nothing of a job outlives its supervisor. Its parent is a small watchdog that only waits for
it: if the supervisor dies before the job ended (``kill -9``, the kernel's OOM killer), the
watchdog stops every process of the job (found by its marker, :mod:`.procs`) and writes the
job's final state, Failed with the reason. Each node process also gets SIGTERM from the kernel
the moment the supervisor dies (``PR_SET_PDEATHSIG``), which its agent forwards to torchrun.
Its hangs are watched here too (:mod:`.hangwatch`), followed by a cell or not.
A copy of the output that fails (a full disk, a quota) ends the job Failed with the reason
instead of leaving it blocked on a full pipe. A rank killed by a signal cannot report its own
end; torchrun's failure report says which rank it was, and the job's failure names it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from ....failures import TorchrunReport, WorkerExit
from ....jobs import CANCELLED, CANCELLED_REASON, FAILED, RUNNING, SUCCEEDED, ReplicaPhase
from ....pod.agent.forks import FORK_SOCKET_ENV, Server, forks_ranks, start_server
from ....pod.exits import KILLED, describe_exit, is_bug, restart_cause, stopped_node_exit
from ....pod.progress import JobProgress
from ....pod.stacks import STACKS_DIR_ENV
from ....store.jobdirs import release_reserve
from ....store.records import keep_hang
from ..joblog import JobLog, say_stop_why, tell_nodes
from ..plan_parts import free_port, port_free
from ..procs import (
    MARKER_ENV,
    NODE_ENV,
    NodeKill,
    die_with,
    exit_code,
    kill_marked,
    kill_node,
    node_marker,
    process_start,
    stop_marked,
)
from ..request import read_plan
from ..state import LocalState, NodeState, save_state
from .causes import (
    GRACE_AFTER_FAILURE_S,
    Bug,
    cause_node,
    cause_rank,
    killed_rank,
    out_of_restarts,
    rank_codes,
)
from .hangwatch import JobHangs, asked
from .output import NodeOutput

__all__ = ["Supervisor"]

SWEEP_TIMEOUT_S = 10.0  # for the processes of a failed attempt to be gone before a restart
TERM_TIMEOUT_S = 10.0
BUG_STOP_S = 1.0  # after a bug: how long the nodes get to end before whatever is left is killed


class Supervisor(NodeOutput):
    """Owns one job's nodes from start to end (see the module's docstring)."""

    def __init__(self, job_dir: Path):
        self.dir = job_dir
        self.plan = read_plan(job_dir)
        self.marker = self.plan.marker
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pumps: list[threading.Thread] = []
        self.rank_files: dict[int, JobLog] = {}
        self.exit_codes: dict[int, int] = {}
        self.first_failure: tuple[float, int] | None = None
        self.bug: Bug | None = None  # this attempt's first bug: the job fails at once
        self.stopped: frozenset[int] | None = None  # the nodes still running when it came
        self.cancelled = False
        self.copy_error: str | None = None
        self.reports: dict[int, TorchrunReport] = {}
        self.progress = JobProgress()
        self.progress_saved = 0.0
        # restarts: None in a plan from before restarts existed (never restarted)
        self.max_restarts = self.plan.max_restarts
        self.restart_delay = self.plan.restart_delay_s
        self.restarts = 0
        self.events = [""] * len(self.plan.nodes)  # each node's last restart, in words
        self.ended: list[int] = []  # nodes of this attempt that failed, in the order seen
        self.reaped: dict[int, NodeKill] = {}  # nodes of this attempt whose leftovers were killed
        self.no_restart = ""  # why a fault was not restarted (its restarts ran out)
        self.stop_error = ""  # processes of a failed attempt that could not be stopped
        self.forks: Server | None = None  # the job's fork server (restarted ranks fork)
        world, env = len(self.plan.nodes) * self.plan.nproc, self.plan.env
        keep = partial(keep_hang, "local", job_dir.name)  # said without a cell (.hangwatch)
        self.hangs = JobHangs(job_dir.name, self.plan.hang_after_s, world, self.plan.nproc,
                              keep, asked(env.get(STACKS_DIR_ENV)))  # fmt: skip
        self.state = LocalState(
            supervisor_pid=os.getpid(),
            supervisor_start=process_start(os.getpid()),
            created=time.time(),
            max_restarts=self.max_restarts,
        )

    def save(self, **changes: Any) -> None:
        """``changes`` (fields of :class:`LocalState`) and the ranks' codes so far, written."""
        with self.lock:
            changes["exit_codes"] = dict(self.exit_codes)
            if self.first_failure:
                changes["failed_rank"] = self.first_failure[1]
            self.state = replace(self.state, **changes)
            save_state(self.dir, self.state, self.marker)  # never over another's end

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Every node process first, then the threads that copy their output (a process
        forked while threads run may deadlock before it runs its command)."""
        base_env = dict(os.environ)
        say_stop_why(self.plan.env, None)
        die_with_us = die_with(os.getpid())
        for node, launch in enumerate(self.plan.nodes):
            mark = {NODE_ENV: node_marker(self.marker, node)}  # what dies with the node
            if self.forks is not None and self.forks.proc.poll() is None:  # else: the agent's own
                mark[FORK_SOCKET_ENV] = self.forks.path
            self.procs.append(
                subprocess.Popen(
                    launch.argv,
                    env={**base_env, **launch.env, **mark},
                    cwd=launch.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    preexec_fn=die_with_us,
                )
            )
        for node, proc in enumerate(self.procs):
            assert proc.stdout is not None
            pump = threading.Thread(target=self._pump, args=(node, proc.stdout), daemon=True)
            pump.start()
            self.pumps.append(pump)
        started = self.state.started or time.time()  # the job's, not this attempt's
        self.save(state=RUNNING, started=started, nodes=self._nodes(), reason="", message="")
        self.hangs.start(time.time(), started)

    def terminate(self, *_args: Any) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def on_cancel(self, _signum: int, _frame: FrameType | None) -> None:
        self.cancelled = True
        self.terminate()

    def run(self) -> None:
        """Start every node, follow them to the end; after a fault with restarts left, stop
        whatever of the job still runs and start every node again."""
        self.forks = self._start_forks()  # stopped by finish, or with this process
        self.start()
        while True:
            self.wait()
            fault = self._fault()
            if fault is None or not self._restart(*fault):
                return

    def _start_forks(self) -> Server | None:
        """One fork server for the job, started before any thread (:mod:`...pod.agent.forks`),
        kept across restarts: every node's torchrun and ranks fork from it, at the first start
        and at each restart, and the job imports torch once. Unmarked, so no sweep
        of an attempt ends it; it dies with this process. None where the nodes run no
        torchrun, or it cannot start."""
        launch = self.plan.nodes[0]
        if not forks_ranks(launch.argv):
            return None
        env = {**os.environ, **launch.env}
        for name in (MARKER_ENV, NODE_ENV):
            env.pop(name, None)
        try:
            return start_server(launch.argv[0], env, preexec_fn=die_with(os.getpid()))
        except OSError:
            return None  # each node's agent starts its own

    def wait(self) -> None:
        failed_at: float | None = None
        terminated_at: float | None = None
        while True:
            codes = [p.poll() for p in self.procs]  # poll every node, every time
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            bad = [(k, c) for k, c in enumerate(codes) if c is not None and is_bug(c)]
            if bad and self.bug is None:  # a node ended with a bug (a rank's: _on_rank_exit)
                self.bug = Bug(now, *bad[0])
            for node, c in enumerate(codes):
                if c not in (None, 0) and node not in self.ended:
                    self.ended.append(node)
                if c is not None and node not in self.reaped:
                    self._reap(node)
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
                self.save(nodes=self._nodes())
            late = failed_at is not None and now - failed_at > GRACE_AFTER_FAILURE_S
            stop = self.cancelled or self.copy_error is not None or late
            if stop and terminated_at is None:
                terminated_at = now
                self.terminate()
            if terminated_at and now - terminated_at > TERM_TIMEOUT_S:
                kill_marked(self.marker, exclude={os.getpid()})
            if self.bug is not None and not self.cancelled:
                self._stop_for_bug(self.bug, codes, now)
            if failed_at is None and not stop:
                self.hangs.check(time.time())
            time.sleep(0.05)
        for node, proc in enumerate(self.procs):  # those that ended in the last poll
            if proc.returncode not in (None, 0) and node not in self.ended:
                self.ended.append(node)
            if node not in self.reaped:
                self._reap(node)
        for pump in self.pumps:
            pump.join(timeout=5.0)
        kill_marked(self.marker, exclude={os.getpid()})  # nothing of the job outlives it

    def _stop_for_bug(self, bug: Bug, codes: list[int | None], now: float) -> None:
        """A bug fails the job at once: every other node is stopped now (SIGTERM; SIGKILL where
        its ranks all ended: its torchrun only waits for the others), and whatever is left of
        the job, the failing node's too, is killed :data:`BUG_STOP_S` later."""
        if self.stopped is None:
            self.stopped = frozenset(k for k, c in enumerate(codes) if c is None)
            others = sorted(self.stopped - {bug.node})
            tell_nodes(self.dir, bug.stop_line(), others)
            say_stop_why(self.plan.env, bug.stop_why())  # before the SIGTERM: its last line
            for node in others:
                if None not in rank_codes(self.exit_codes, node, self.plan.nproc):
                    kill_node(self.marker, node)
                else:
                    self.procs[node].send_signal(signal.SIGTERM)
        if now - bug.at > BUG_STOP_S:
            kill_marked(self.marker, exclude={os.getpid()})

    def _reap(self, node: int) -> None:
        """Node ``node``'s agent ended: kill what is left of the node at once, as a container
        runtime does when a container's first process ends, and say so at the end of the
        node's log (once its output is all copied). A node that ended by itself has nothing
        left: torchrun stops its ranks before it exits."""
        gone = self.reaped[node] = kill_node(self.marker, node)
        if not gone.killed:
            return
        for rank in gone.ranks:  # like torchrun's report of a rank a signal killed
            self._on_worker_exit(WorkerExit(rank, KILLED, root=False), ours=self.bug is not None)
        if node < len(self.pumps):
            self.pumps[node].join(timeout=1.0)  # its pipe closes as its last process dies
        code = exit_code(self.procs[node].returncode) or 0
        said = f"node {node} exited {code} ({describe_exit(code)}); {gone.describe()}"
        tell_nodes(self.dir, said, [node])

    def _nodes(self, phase: ReplicaPhase | None = None) -> tuple[NodeState, ...]:
        return tuple(self._node(node, phase) for node in range(len(self.procs)))

    def _node(self, node: int, phase: ReplicaPhase | None) -> NodeState:
        """Node ``node`` as ``state.json`` says it; one stopped after a bug elsewhere reads as
        its ranks ended (:func:`.causes.stopped_node_exit`), and says why it was stopped."""
        proc, event = self.procs[node], self.events[node]
        code = exit_code(proc.returncode)
        bug, stopped = self.bug, self.stopped or frozenset()
        if code is not None and bug is not None and node in stopped:
            code = stopped_node_exit(code, rank_codes(self.exit_codes, node, self.plan.nproc))
            if node != bug.node and not event:  # a restart's cause stays said
                event = bug.stopped_event(code)
        return NodeState(proc.pid, code, self.restarts, event, phase)

    # -- restarts -------------------------------------------------------------------------
    def _fault(self) -> tuple[int, int] | None:
        """(node, exit code) of the fault that ended this attempt, when every node is to start
        again; None when the job ends: it succeeded, was cancelled, lost its output, failed
        with a bug (any node or rank code 1-127: a bug fails again), or has no restart left."""
        if self.cancelled or self.copy_error is not None:
            return None
        codes = [exit_code(p.returncode) or 0 for p in self.procs]
        if all(c == 0 for c in codes):
            return None
        ranks = self.exit_codes.values()
        if any(is_bug(c) for c in [*codes, *ranks]):
            return None
        node = cause_node(codes, self.ended, self.exit_codes, self.first_failure, self.plan.nproc)
        if self.max_restarts is None or self.restarts >= self.max_restarts:
            if self.max_restarts is not None:
                self.no_restart = out_of_restarts(self.restarts, self.max_restarts)
            return None
        return node, codes[node]

    def _restart(self, node: int, code: int) -> bool:
        """Stop what is left of the job, start every node again (the first restart at once, each
        later one after a backoff: :func:`restart_backoff`); False when a cancel came meanwhile
        or the failed attempt's processes could not be stopped."""
        self.restarts += 1
        limit = self.max_restarts
        cause = restart_cause(code)
        rank = cause_rank(node, self.exit_codes, self.first_failure, self.plan.nproc)
        # its ranks killed with it: then they did not fail, the node did
        with_it = self.reaped.get(node, NodeKill()).ranks_killed()
        why = f"node {node} exited {code}"
        why += f" ({rank})" if rank and not with_it else f" ({describe_exit(code)})"
        why += f"; {with_it}" if with_it else ""
        for k in range(len(self.events)):
            self.events[k] = (
                f"restarted after {cause}" + (f"; {with_it}" if with_it else "")
                if k == node
                else f"restarted with every node after node {node}'s {cause}"
            )
        text = f"restart {self.restarts} of at most {limit}: {why}; starting every node again"
        nodes = self._nodes(ReplicaPhase.RESTARTING)
        self.save(reason="Restarting", message=text, restarts=self.restarts, nodes=nodes)
        tell_nodes(self.dir, text, range(len(self.plan.nodes)))
        left = _sweep(self.marker)
        if left:
            self.stop_error = (
                f"{len(left)} process(es) of the failed attempt (pids {', '.join(map(str, left))}) "
                "ignore SIGKILL (stuck in the kernel), so the job could not start again"
            )
            return False
        deadline = time.monotonic() + restart_backoff(self.restarts, self.restart_delay)
        while not self.cancelled and time.monotonic() < deadline:  # a cancel starts nothing more
            time.sleep(0.02)
        if self.cancelled:
            return False
        self._free_port()
        with self.lock:
            self.procs, self.pumps, self.reports, self.ended = [], [], {}, []
            self.reaped = {}
            again = self.progress.restarted(time.time())  # restarting until its rate is known
            self.exit_codes.clear()
            self.first_failure, self.bug, self.stopped = None, None, None
            self.state = replace(self.state, failed_rank=None, progress=again)  # the new attempt's
        self.start()
        return True

    def _free_port(self) -> None:
        """The rendezvous port again, or a fresh one when something else took it meanwhile."""
        port = self.plan.master_port
        if port and not port_free(port):
            self.plan = self.plan.with_port(free_port(set()))
            self.state = replace(self.state, master_port=self.plan.master_port)

    def finish(self) -> None:
        nodes = self._nodes()
        codes = [n.exit_code for n in nodes]
        message = ""
        if self.cancelled:
            state, reason = CANCELLED, CANCELLED_REASON
        elif self.copy_error is not None:
            state, reason = FAILED, "LogWriteFailed"
            message = (
                f"{self.copy_error}: the job was stopped, because its output could no longer "
                f"be kept. Free space in {self.dir.parent} (or point KTRAIN_HOME at a folder "
                f"with room), then run it again."
            )
        elif all(c == 0 for c in codes):
            state, reason = SUCCEEDED, "AllRanksSucceeded"
        elif self.stop_error:
            state, reason, message = FAILED, "RestartFailed", self.stop_error
        else:
            state = FAILED
            reason = "RankFailed" if self.first_failure else "NodeFailed"
            codes_now = [exit_code(p.returncode) or 0 for p in self.procs]
            message = killed_rank(self.first_failure, self.reaped, codes_now, self.exit_codes)
            if self.no_restart:
                message = f"{message}: {self.no_restart}" if message else self.no_restart
        if self.first_failure is None and state == FAILED and not self.cancelled:
            bad = next((i for i, c in enumerate(codes) if c != 0), None)
            if bad is not None:
                self.state = replace(self.state, failed_node=bad)
        if self.progress.progress is not None:  # the last update may have been held back
            self.state = replace(self.state, progress=self.progress.progress)
        self.save(state=state, reason=reason, message=message, finished=time.time(), nodes=nodes)
        self.hangs.stop()
        release_reserve(self.dir)
        if self.forks is not None:  # once the end is written: its interpreter takes a while
            self.forks.stop()


def restart_backoff(restart: int, base: float) -> float:
    """Seconds to wait before restart number ``restart`` (1, 2, ...): none before the first (a
    killed rank comes back as soon as its nodes are stopped, as torchrun restarts its workers),
    then ``base``, doubling, as the kubelet backs off a container that keeps failing: a fault
    that repeats at once gets the machine time to settle."""
    return 0.0 if restart <= 1 else base * 2 ** (restart - 2)


def _sweep(marker: str) -> list[int]:
    """Stop every process of the job but this one and wait until they are gone (a restart must
    not meet the last attempt's ranks on its port); the pids still there after a while."""
    return stop_marked(marker, exclude={os.getpid()}, grace=1.0, timeout=SWEEP_TIMEOUT_S)
