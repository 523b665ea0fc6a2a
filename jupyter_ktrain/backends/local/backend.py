""":class:`LocalBackend`: N "nodes" of torchrun on 127.0.0.1 (the embedded default).

Each node gets exactly the command and the ``PET_*``/``MASTER_*`` environment a PyTorchJob
replica gets from the Training Operator, so a job that runs here runs the same way on a
cluster. Jobs live in an on-disk registry (``$KTRAIN_HOME/jobs/NAME``, default
``~/.ktrain``): the captured code, the plan, ``state.json``, and every node's and rank's log.
A detached supervisor owns the processes, so a job survives its kernel and a new kernel can
list and re-attach to it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, JobNotFound
from ...extras import require_torch
from ...jobs import CANCELLED, CANCELLED_REASON, TERMINAL_STATES, JobShape, JobStatus
from ...pod.protocol import Profile, Stack
from ...pod.stacks import STACKS_DIR_ENV, ask, ask_profile
from ...spec.job import check_job_name
from ...store.files import make_private_dirs, open_append, store_error, write_private
from ...store.home import jobs_dir, ktrain_home
from ...store.jobdirs import create_job_dir, job_marker, release_reserve
from ..base import Backend, Job, LaunchPlan, Request
from ..capabilities import ShapeKnown, StacksShown, WarmCapable
from ..logsource import LogSource
from ..warm_shape import warm_shape
from .folders import JOB_META, JOB_META_VERSION, JobFolders, alive
from .gpus import machine_gpus
from .logs import FileLogSource, LogIndex
from .planner import BACKEND, Planner
from .procs import marked_pids, stop_marked
from .request import PLAN, LocalRequest, read_plan
from .state import LocalState, change_state
from .warm_runs import LocalWarm

if TYPE_CHECKING:
    from ...capture import CapturedProgram
    from ...pod.agent.sampler import GpuInfo
    from ...spec.job import JobSpec

__all__ = ["LocalBackend"]

CANCEL_TIMEOUT_S = 15.0
DELETE_WAIT_S = 5.0  # for a job folder that a process of the job wrote in as it was deleted


class LocalBackend(Backend, WarmCapable, ShapeKnown, StacksShown):
    """``gpus`` lists this machine's GPUs (a seam for tests; default :func:`machine_gpus`,
    asked only when a job wants GPUs).

    Its parts are each handed what they need, none the backend: the job folders
    (:class:`~.folders.JobFolders`: state, status, shape, the list), the planner of new jobs
    (:class:`~.planner.Planner`) and the warm part (:class:`~.warm_runs.LocalWarm`, given both)."""

    name = BACKEND
    rdma_capable = False  # --rdma is a pod network setting; local nodes talk over loopback
    hangs_watched = True  # by each job's supervisor (.hangwatch)
    ranks_here = True

    def __init__(
        self,
        home: Path | None = None,
        python: str | None = None,
        gpus: Callable[[], list[GpuInfo]] | None = None,
    ):
        self.home = home or ktrain_home()
        self.python = python or sys.executable
        self.folders = JobFolders(self.home)
        self.planner = Planner(self.folders, self.python, gpus or machine_gpus)
        self._log_index = LogIndex()
        self.warm: LocalWarm = LocalWarm(self.folders, self.planner)  # the runs of --warm jobs

    # -- registry -------------------------------------------------------------------------
    def job_dir(self, name: str) -> Path:
        """The job's folder, always inside the store: ``name`` must be a valid job name."""
        return self.folders.job_dir(name)

    def status(self, name: str) -> JobStatus:
        return self.folders.status(name)

    def list_jobs(self) -> list[JobStatus]:
        return self.folders.list_jobs()

    def shape(self, name: str) -> JobShape | None:
        return self.folders.shape(name)

    # -- plan -----------------------------------------------------------------------------
    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[LocalRequest]:
        require_torch(self.python, "torchrun")  # every local node starts one; nothing made yet
        if spec.warm:
            return self.warm.dryrun(spec, program)
        return self.planner.plan(spec, program)

    # -- lifecycle ------------------------------------------------------------------------
    def schedule(self, plan: LaunchPlan[Request]) -> Job:
        made = plan.made_by(LocalRequest)
        name = made.spec.name
        if made.request.reuse:  # a run on a warm job: only the program travels
            try:
                number = self.warm.order_run(self.job_dir(name), made.files or made.program.files)
            except OSError as exc:
                raise store_error(self.job_dir(name), exc) from None
            return Job(name, self, made, run=number)
        if made.request.replaces:
            self.delete(made.request.replaces)
        job_dir = create_job_dir(jobs_dir(self.home), check_job_name(name))  # exclusive
        run: int | None = None
        try:
            self._write(job_dir, made)
            if made.request.warm:
                run = self.warm.order_run(job_dir, made.files or made.program.files)
            self._start_supervisor(job_dir, made)
        except BaseException as exc:
            shutil.rmtree(job_dir, ignore_errors=True)  # ours alone: create_job_dir made it
            if isinstance(exc, OSError):
                raise store_error(job_dir.parent, exc) from None
            raise
        return Job(name, self, made, run=run)

    def _start_supervisor(self, job_dir: Path, plan: LaunchPlan[LocalRequest]) -> None:
        with open_append(job_dir / "supervisor.log") as log:
            subprocess.run(
                [
                    self.python,
                    "-m",
                    "jupyter_ktrain.backends.local.daemon",
                    "--daemon",
                    str(job_dir),
                ],
                env={
                    **os.environ,
                    **plan.environ,  # --env NAME: through the environment, never a file
                    "PYTHONPATH": plan.request.nodes[0].env["PYTHONPATH"],
                },
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=60,
            )

    def _write(self, job_dir: Path, plan: LaunchPlan[LocalRequest]) -> None:
        """The job's files, private to this user (folders 0700, files 0600)."""
        code_dir = job_dir / "code"
        code_dir.mkdir(mode=0o700)
        for rel, data in () if plan.request.warm else (plan.files or plan.program.files).items():
            target = code_dir / rel
            make_private_dirs(target.parent)
            write_private(target, data)
        spec = plan.spec
        meta: dict[str, Any] = {
            "version": JOB_META_VERSION,
            "name": spec.name,
            "kind": spec.kind,
            "nodes": spec.nodes,
            "nproc": spec.nproc,
            "gpus": spec.resources.gpus,
        }
        if plan.request.warm:
            meta.update(warm=True, warm_shape=warm_shape(spec))
        write_private(job_dir / JOB_META, json.dumps(meta, indent=1).encode())
        write_private(job_dir / PLAN, json.dumps(plan.request.to_json(), indent=1).encode())
        write_private(job_dir / "dry-run.txt", plan.text.encode())

    def cancel(self, name: str) -> None:
        """Stop every process of the job, whoever holds them. The supervisor does it and writes
        Cancelled; when it is gone (killed), this stops what is left and writes Cancelled with
        what it found. Raises :class:`BackendError` only when processes could not be stopped."""
        raw = self.folders.state(name)
        marker = job_marker(self.job_dir(name))
        if marker is None or (raw.state in TERMINAL_STATES and not marked_pids(marker)):
            return  # ended, or not started yet (its folder is being made)
        try:
            self._stop(name, raw, marker)
        except (JobNotFound, FileNotFoundError):
            if self.job_dir(name).is_dir():
                raise
            stop_marked(marker)  # deleted meanwhile by another command, which stopped it

    def _stop(self, name: str, raw: LocalState, marker: str) -> None:
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        while raw.supervisor_pid is None and time.monotonic() < deadline:
            time.sleep(0.05)  # scheduled a moment ago: its supervisor is starting
            raw = self.folders.state(name)
        pid = raw.supervisor_pid
        supervised = alive(raw) and pid is not None
        if pid is not None and supervised:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            while time.monotonic() < deadline and alive(self.folders.state(name)):
                time.sleep(0.05)
        running = len(marked_pids(marker))
        left = stop_marked(marker)  # what ignored SIGTERM, or what nobody supervises
        if left:
            raise BackendError(
                f"Could not stop {len(left)} process(es) of job {name!r} (pids "
                f"{', '.join(map(str, left))}): they ignore SIGKILL, which means they are stuck "
                f"in the kernel (I/O). `ps -o pid,stat,wchan -p PID` shows where."
            )
        self._end_cancelled(name, raw, marker, supervised, running)

    def _end_cancelled(
        self, name: str, raw: LocalState, marker: str, supervised: bool, running: int
    ) -> None:
        """Cancelled, when the supervisor could not say it (it was gone, or stuck)."""
        if supervised and not alive(self.folders.state(name)):
            return  # it ended the job itself
        gone = "was gone" if not supervised else "did not answer"
        message = f"its supervisor (pid {raw.supervisor_pid}) {gone}; " + (
            f"the cancel stopped the {running} process(es) of the job that still ran"
            if running
            else "none of the job's processes was running"
        )
        ended = {"state": CANCELLED, "reason": CANCELLED_REASON, "message": message}
        if change_state(self.job_dir(name), marker, **ended, finished=time.time()):
            release_reserve(self.job_dir(name))
        if supervised and raw.supervisor_pid is not None:  # stuck: the job has its final state
            with contextlib.suppress(ProcessLookupError):  # now, and it may not write another
                os.kill(raw.supervisor_pid, signal.SIGKILL)

    def delete(self, name: str) -> None:
        """Cancel if running, then remove the job and its logs from the registry."""
        self.cancel(name)
        job_dir = self.job_dir(name)
        deadline = time.monotonic() + DELETE_WAIT_S
        while True:
            try:
                shutil.rmtree(job_dir)
                return
            except FileNotFoundError:
                return  # deleted meanwhile by another command
            except OSError as exc:
                # a file written as the folder was emptied (a process of the job winding
                # down after its final state): emptied again until it stays empty
                if exc.errno != errno.ENOTEMPTY or time.monotonic() > deadline:
                    raise store_error(job_dir, exc, "delete a job from") from None
                time.sleep(0.05)

    def stacks(self, name: str, rank: int | None = None) -> list[tuple[str, Stack]]:
        """Asked of the ranks' sockets (:mod:`jupyter_ktrain.pod.stacks`), in the folder the
        job's plan gave its nodes."""
        folder = self._stacks_dir(name)
        return [("", stack) for stack in ask(folder, None if rank is None else {rank})]

    def profile(self, name: str, steps: int, rank: int | None = None) -> list[tuple[str, Profile]]:
        """Asked of the ranks' sockets, as :meth:`stacks`."""
        folder = self._stacks_dir(name)
        return [("", p) for p in ask_profile(folder, steps, None if rank is None else {rank})]

    def _stacks_dir(self, name: str) -> str:
        """The folder of the job's rank sockets, from its plan."""
        self.folders.state(name)  # JobNotFound
        try:
            folder = read_plan(self.job_dir(name)).nodes[0].env.get(STACKS_DIR_ENV)
        except OSError as exc:
            raise store_error(self.job_dir(name), exc, "read") from None
        except ValueError as exc:  # PlanError: a plan.json this version cannot read
            raise BackendError(f"{name!r}: its plan cannot be read ({exc}).") from None
        if not folder:
            raise BackendError(
                f"{name!r} was started by an older jupyter-ktrain, whose ranks do not answer "
                "`stacks`; a job started now does."
            )
        return folder

    def log_sources(self, name: str) -> list[LogSource]:
        nodes = self.folders.meta(name)["nodes"]
        return [
            FileLogSource(self.job_dir(name) / f"node-{i}.log", f"{name}-node-{i}")
            for i in range(nodes)
        ]

    def read_logs(self, name: str) -> Iterator[tuple[str, str]]:
        self.folders.state(name)
        for source in self.log_sources(name):
            for line in source.finish():
                yield source.replica, line

    def read_logs_timed(self, name: str) -> Iterator[tuple[float | None, str, str]]:
        """Lines with the time the supervisor wrote each (``node-K.times``, one per line)."""
        self.folders.state(name)
        for i, source in enumerate(self.log_sources(name)):
            try:
                stamps = (self.job_dir(name) / f"node-{i}.times").read_text().split()
            except OSError:
                stamps = []
            for k, line in enumerate(source.finish()):
                yield (float(stamps[k]) if k < len(stamps) else None), source.replica, line

    def read_logs_from(
        self, name: str, start: Mapping[str, int], limit: int | None = None
    ) -> Iterator[tuple[float | None, str, int, str]]:
        """Only the new part of each node's log: seeks to where an earlier read ended
        (:class:`LogIndex`), so a poll costs what was written since, not the whole log."""
        self.folders.state(name)
        for i, source in enumerate(self.log_sources(name)):
            assert isinstance(source, FileLogSource)
            times = self.job_dir(name) / f"node-{i}.times"
            for t, index, line in self._log_index.read(
                source.path, times, start.get(source.replica, 0), limit
            ):
                yield t, source.replica, index, line
