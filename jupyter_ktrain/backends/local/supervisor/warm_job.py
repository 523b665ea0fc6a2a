"""The supervisor of a local ``--warm`` job: the node agents stay, runs come and go.

Started like every local job (:mod:`.supervisor`, which picks this class when
``plan.json`` says ``"warm": true``), it starts one warm agent per node
(:mod:`jupyter_ktrain.pod.agent.warm`) and keeps them. Each node's stream is split by run: the
agent frames a run with ``run`` and ``run_end`` records, and what lies between goes to
``runs/N/node-K.log`` (and ``.times``) and ``runs/N/rank-R.log``, the layout of a job folder,
so a run reads like a job. ``runs/N/state.json`` is the run's state: Running from the first
node's ``run`` record; once every node ended the run, Succeeded, Failed (a node's code, the
first failing rank) or Cancelled (``runs/N/abort`` says ``cancelled by the user``).

When one node's run fails, the others get :data:`FAIL_GRACE_S` to end theirs (their ranks lose
the peer and say so; none when it failed with a bug, as a job that is not warm), then the run
is aborted on every node (``runs/N/abort``), so a rank
blocked in a collective cannot hold the job. The job itself (``state.json``) stays Running
while its agents live, with a ``warm`` entry: the last run, the run in progress, since when it
is idle, its idle limit. After ``idle_limit_s`` (``warm.json``, changed by ``%ktrain warm NAME
--idle``; 0 ends it now) with no run, the job ends as a cluster's warm job does at its idle
limit: every node's agent is told to end (``control.json``'s ``idle_limit_s``: 0) and exits 0,
and the job Succeeded (reason ``IdleLimit``; Cancelled when an agent had to be stopped); every
process of it goes. A node agent that dies ends the job (Failed): a warm job is not restarted.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from ....jobs import CANCELLED, CANCELLED_BY_USER, CANCELLED_REASON, FAILED, RUNNING, SUCCEEDED
from ....pod.exits import is_bug
from ....pod.progress import JobProgress, fmt_duration
from ....pod.protocol import EXIT, READY, RUN, RUN_END, Metric, Resume, parse_line, record_type
from ....store.files import make_private_dirs, replace_private, write_private
from ....store.jobdirs import release_reserve
from ...warm_shape import DEFAULT_IDLE_S
from ..joblog import JobLog
from ..state import LocalState, NodeState, WarmState, save_state
from .nodes import Supervisor
from .output import PROGRESS_SAVE_S

__all__ = ["DEFAULT_IDLE_S", "IDLE_LIMIT", "WarmSupervisor", "read_idle_limit"]

FAIL_GRACE_S = 2.0
AGENT_END_S = 15.0  # for the agents told to end (the idle limit) to exit by themselves
IDLE_LIMIT = "IdleLimit"
WARM_FILE = "warm.json"


def read_idle_limit(job_dir: Path) -> float:
    """The job's idle limit in seconds (``warm.json``); 0 ends it now."""
    try:
        return float(json.loads((job_dir / WARM_FILE).read_text())["idle_limit_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_IDLE_S


def abort_run(job_dir: Path, run: int, why: str) -> bool:
    """Ask every node to stop run ``run`` (``runs/N/abort``); False when it was asked before."""
    path = job_dir / "runs" / str(run) / "abort"
    if path.exists():
        return False
    with contextlib.suppress(FileExistsError):
        write_private(path, why.encode())
        return True
    return False


class _Run:
    """One run as the supervisor follows it."""

    def __init__(self, number: int, nodes: int):
        self.number = number
        self.nodes = nodes
        self.started = time.time()
        self.exit_codes: dict[int, int] = {}
        self.first_failure: int | None = None
        self.node_codes: dict[int, int] = {}
        self.aborted: dict[int, str] = {}
        self.failed_at: float | None = None
        self.progress = JobProgress()  # from the run's records, as a job's (one rule)
        self.progress_saved = 0.0

    @property
    def ended(self) -> bool:
        return len(self.node_codes) == self.nodes

    def state(self) -> LocalState:
        out = LocalState(
            state=RUNNING,
            run=self.number,
            started=self.started,
            progress=self.progress.progress,
            exit_codes=dict(self.exit_codes),
            failed_rank=self.first_failure,
            nodes=tuple(
                NodeState(exit_code=self.node_codes.get(k), last_event=self.aborted.get(k, ""))
                for k in range(self.nodes)
            ),
        )
        if not self.ended:
            return out
        out = replace(out, finished=time.time())
        why = next(iter(self.aborted.values()), "")
        if any(w.startswith(CANCELLED_BY_USER) for w in self.aborted.values()):
            return replace(out, state=CANCELLED, reason=CANCELLED_REASON, message=why)
        if any(self.node_codes.values()):
            reason = "RankFailed" if self.first_failure is not None else "NodeFailed"
            return replace(out, state=FAILED, reason=reason, message=why)
        if self.aborted:
            return replace(out, state=FAILED, reason="Aborted", message=why)
        return replace(out, state=SUCCEEDED, reason="AllRanksSucceeded")


class WarmSupervisor(Supervisor):
    def __init__(self, job_dir: Path):
        super().__init__(job_dir)
        self.runs: dict[int, _Run] = {}
        self.last_run = 0
        self.idle_since = time.time()
        self.ended_why = ""  # why the warm job itself ended (idle limit, a node lost)
        self.ended_reason = ""
        self.ready: set[int] = set()  # nodes whose agent imported torch and waits for runs

    # -- output, split by run --------------------------------------------------------------
    def _copy(self, node: int, stream: IO[bytes]) -> None:
        """Every line to ``node-K.log`` (the node's whole history, as a pod log is), and a
        run's lines also to ``runs/N/node-K.log``."""
        log = JobLog(self.dir / f"node-{node}.log")
        times = JobLog(self.dir / f"node-{node}.times")
        in_run: tuple[JobLog, JobLog] | None = None  # the run's node log and times, during a run
        rank_files: dict[int, JobLog] = {}
        try:
            for raw in iter(stream.readline, b""):
                line = parse_line(raw.decode("utf-8", "replace").rstrip("\n"))
                kind = record_type(line.record) if line.source == "agent" else None
                if kind == RUN and line.record is not None:
                    run_dir = self._run_dir(int(line.record["run"]))
                    in_run = (
                        JobLog(run_dir / f"node-{node}.log"),
                        JobLog(run_dir / f"node-{node}.times"),
                    )
                    self._on_run(int(line.record["run"]))
                stamp = b"%.6f\n" % time.time()
                data = raw if raw.endswith(b"\n") else raw + b"\n"
                for out_log, out_times in [(log, times), *([in_run] if in_run else [])]:
                    out_times.write(stamp)
                    out_log.write(data)
                if kind == RUN_END and line.record is not None:
                    for f in (*(in_run or ()), *rank_files.values()):
                        f.close()
                    in_run, rank_files = None, {}
                    self._on_run_end(node, line.record)
                elif kind == READY:
                    with self.lock:
                        self.ready.add(node)
                    self.save(nodes=self._nodes())
                    self._save_warm()
                elif line.rank is not None:
                    self._on_rank_line(line, rank_files)
        finally:
            for f in (log, times, *(in_run or ()), *rank_files.values()):
                f.close()

    def _run_dir(self, run: int) -> Path:
        path = self.dir / "runs" / str(run)
        make_private_dirs(path)
        return path

    def _on_rank_line(self, line: Any, files: dict[int, JobLog]) -> None:
        run = self.runs.get(self.last_run)
        if run is None:
            return
        if line.record is None:
            if line.rank not in files:
                files[line.rank] = JobLog(self._run_dir(run.number) / f"rank-{line.rank}.log")
            files[line.rank].write(line.text.encode() + b"\n")
        elif record_type(line.record) == EXIT:
            code = int(line.record.get("code", 1))
            with self.lock:
                run.exit_codes[line.rank] = code
                if code != 0 and (
                    run.first_failure is None or run.exit_codes[run.first_failure] == 143
                ):
                    run.first_failure = line.rank
            self._save_run(run)
        elif isinstance(line.typed, (Metric, Resume)):
            self._on_run_progress(run, line.rank, line.typed)

    def _on_run_progress(self, run: _Run, rank: int, record: Metric | Resume) -> None:
        """A run's progress, kept as a job's is (a few times a second): in the run's state,
        and in the job's while the run goes, so every view of either shows it."""
        with self.lock:
            now = time.time()
            p = run.progress.feed(rank, record, now)
            if p is None or (now - run.progress_saved < PROGRESS_SAVE_S and not p.done):
                return
            run.progress_saved = now
        self._save_run(run)
        self._save_warm()

    def _on_run(self, number: int) -> None:
        with self.lock:
            if number not in self.runs:
                self.runs[number] = _Run(number, len(self.plan.nodes))
                self.last_run = max(self.last_run, number)
        self._save_run(self.runs[number])
        self._save_warm()

    def _on_run_end(self, node: int, record: dict[str, Any]) -> None:
        run = self.runs.get(int(record.get("run", 0)))
        if run is None:
            return
        with self.lock:
            ranks = record.get("ranks")
            ranks = ranks if isinstance(ranks, dict) else {}
            for rank, code in ranks.items():  # a killed rank's code; its own record wins
                run.exit_codes.setdefault(int(rank), int(code))
            run.node_codes[node] = int(record.get("code", 1))
            if record.get("aborted"):
                run.aborted[node] = str(record["aborted"])
            elif record.get("why") and run.node_codes[node]:
                run.aborted.setdefault(node, f"node {node}: {record['why']}")
            if run.node_codes[node] and run.failed_at is None:
                run.failed_at = time.monotonic()
            if run.ended:
                self.idle_since = time.time()
        self._save_run(run)
        self._save_warm()

    def _save_run(self, run: _Run) -> None:
        with self.lock:
            state = run.state()
        save_state(self._run_dir(run.number), state)  # the first end written stands

    def _save_warm(self) -> None:
        """The job's ``warm`` entry, and its progress: the run's in progress (None between
        runs: a run's own state keeps where it ended)."""
        active = self.runs.get(self.last_run)
        running = active is not None and not active.ended
        self.save(
            warm=WarmState(
                runs=self.last_run,
                active=self.last_run if running else None,
                idle_since=None if running else self.idle_since,
                idle_limit_s=read_idle_limit(self.dir),
                ready=len(self.ready),
            ),
            progress=active.progress.progress if running and active is not None else None,
        )

    # -- the job's life --------------------------------------------------------------------
    def run(self) -> None:
        self.start()
        self._save_warm()
        while not self.cancelled and self.copy_error is None:
            if any(p.poll() is not None for p in self.procs):
                self._node_lost()
                break
            self._abort_failed_runs()
            if self._idle_over():
                self._end_agents()
                break
            time.sleep(0.05)
        self.cancelled = True  # the nodes stop now: wait() terminates them
        self.wait()

    def _node_lost(self) -> None:
        node = next(k for k, p in enumerate(self.procs) if p.poll() is not None)
        code = self.procs[node].returncode
        self.ended_reason = "NodeFailed"
        self.ended_why = f"node {node}'s warm agent exited with code {code}; the warm job ended"

    def _abort_failed_runs(self) -> None:
        for run in list(self.runs.values()):
            # a bug gets no grace, as in a job that is not warm: the other nodes stop at once
            bug = any(is_bug(c) for c in run.node_codes.values())
            late = run.failed_at is not None and (
                bug or time.monotonic() - run.failed_at > FAIL_GRACE_S
            )
            if late and not run.ended:
                failed = next(k for k, c in run.node_codes.items() if c)
                abort_run(self.dir, run.number, f"node {failed} failed")

    def _idle_over(self) -> bool:
        active = self.runs.get(self.last_run)
        if active is not None and not active.ended:
            return False
        if (self.dir / "control.json").exists() and self._ordered() > self.last_run:
            return False  # a run was ordered and has not started yet
        limit = read_idle_limit(self.dir)
        idle = time.time() - self.idle_since
        if idle < limit:
            return False
        self.ended_reason = IDLE_LIMIT
        self.ended_why = (
            f"its idle limit ({fmt_duration(limit)}) ended it after {fmt_duration(idle)} "
            "without a run"
            if limit > 0
            else "ended with --idle 0"
        )
        return True

    def _end_agents(self) -> None:
        """Tell every node's agent to end by itself (an idle limit of 0 in ``control.json``,
        the order kept), and give them :data:`AGENT_END_S` to exit; one that does not is
        stopped with the rest of the job."""
        path = self.dir / "control.json"
        try:
            control = json.loads(path.read_text())
        except (OSError, ValueError):
            control = None
        if not isinstance(control, dict):  # no run was ever ordered
            control = {"version": 1, "run": 0, "code_dir": ""}
        replace_private(path, json.dumps({**control, "idle_limit_s": 0}).encode())
        deadline = time.monotonic() + AGENT_END_S
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.05)

    def _ordered(self) -> int:
        try:
            return int(json.loads((self.dir / "control.json").read_text())["run"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def finish(self) -> None:
        """The job's end, and the end of a run it cut short."""
        why = self.ended_why or CANCELLED_BY_USER
        for run in self.runs.values():
            if not run.ended:
                with self.lock:
                    for k in range(run.nodes):
                        run.node_codes.setdefault(k, 143)
                        run.aborted.setdefault(k, why)
                self._save_run(run)
        if self.ended_reason == "NodeFailed":
            state, reason = FAILED, "NodeFailed"
        elif self.ended_reason == IDLE_LIMIT:  # its agents ended themselves: a good end
            ended_well = all(p.returncode == 0 for p in self.procs)
            state, reason = (SUCCEEDED if ended_well else CANCELLED), IDLE_LIMIT
        else:
            state, reason = CANCELLED, CANCELLED_REASON
        self._save_warm()
        self.save(
            state=state, reason=reason, message=self.ended_why, finished=time.time(),
            nodes=self._nodes(),
        )  # fmt: skip
        release_reserve(self.dir)
