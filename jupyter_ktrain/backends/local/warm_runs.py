"""The runs of a local ``--warm`` job, for :class:`~.backend.LocalBackend`, which delegates its
warm hooks here and hands this part what it uses (the job folders, :class:`~.folders.JobFolders`,
and the planner of a new job, :class:`~.planner.Planner`), not itself: find the live warm job a
cell runs on (or say why a new one starts), order a run through the job's folder
(``runs/N/code``, then ``control.json``, which the nodes' warm agents watch), read a run's state
and logs (``runs/N/``, written by :mod:`.warm_supervisor`), cancel a run, change the idle limit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import JobNotFound, SpecError
from ...jobs import (
    CANCELLED,
    CANCELLED_BY_USER,
    CANCELLED_REASON,
    FAILED,
    PENDING,
    TERMINAL_STATES,
    JobStatus,
)
from ...store.files import make_private_dirs, replace_private, write_private
from ...words import describe, run_waiting
from ..base import LaunchPlan
from ..logsource import LogSource
from ..warm_shape import check_warm, shape_changes, warm_shape
from .folders import JobFolders, to_status
from .logs import FileLogSource
from .planner import BACKEND, Planner
from .request import LocalRequest, read_plan
from .state import change_state, read_state
from .supervisor.warm_job import IDLE_LIMIT, abort_run

if TYPE_CHECKING:
    from ...capture import CapturedProgram
    from ...spec.job import JobSpec

__all__ = ["LocalWarm"]

CANCEL_TIMEOUT_S = 15.0


class LocalWarm:
    """The warm side of one :class:`~.backend.LocalBackend` (``backend.warm``): the warm jobs
    of the store ``folders``; a new warm job is planned by ``planner``."""

    def __init__(self, folders: JobFolders, planner: Planner):
        self.folders = folders
        self.planner = planner

    def jobs(self) -> list[tuple[JobStatus, dict[str, Any]]]:
        """Every warm job the store holds (newest first), with its ``job.json``."""
        out = []
        for status in reversed(self.folders.list_jobs()):
            try:
                meta = self.folders.meta(status.name)
            except (OSError, ValueError):
                continue
            if meta.get("warm"):
                out.append((status, meta))
        return out

    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[LocalRequest]:
        """A run on the live warm job of this shape (``--name``'s, else the newest), or a new
        warm job, with a note saying why when one of another shape runs."""
        check_warm(spec)
        shape = warm_shape(spec)
        jobs = self.jobs()
        live = [(st, meta) for st, meta in jobs if not st.terminal]
        named = [(st, meta) for st, meta in live if st.name == spec.name]
        same = [(st, meta) for st, meta in live if meta.get("warm_shape") == shape]
        target = named[0] if named and named[0][1].get("warm_shape") == shape else None
        target = target or (None if named else (same[0] if same else None))
        if target is not None:
            return self.run_plan(spec, program, target[0])
        notes: list[str] = []
        if named:
            changes = ", ".join(shape_changes(named[0][1].get("warm_shape", {}), shape))
            notes.append(
                f"the warm job {spec.name!r} has another shape ({changes}): it is deleted and "
                "a new warm job of this shape starts in its place"
            )
        elif live:
            other = live[0][0].name
            changes = ", ".join(shape_changes(live[0][1].get("warm_shape", {}), shape))
            notes.append(
                f"the warm job {other!r} has another shape ({changes}): starting a new warm "
                f"job; {other!r} keeps its nodes until its idle limit (`%ktrain warm {other} "
                "--idle 0` ends it now)"
            )
        gone = [st for st, meta in jobs if st.terminal and meta.get("warm_shape") == shape]
        if gone and gone[0].reason == IDLE_LIMIT and not live:
            notes.append(f"the warm job {gone[0].name!r} was ended: {gone[0].message}")
        notes.append("warm job: its nodes stay up after this run for the next --warm cell")
        return self.planner.plan(spec, program, tuple(notes), spec.name if named else "")

    def run_plan(
        self, spec: JobSpec, program: CapturedProgram, job: JobStatus
    ) -> LaunchPlan[LocalRequest]:
        """A run on the live warm job ``job``: only the program travels."""
        if job.warm is not None and job.warm.active is not None:
            raise SpecError(
                f"The warm job {job.name!r} is busy with run {job.warm.active}: wait for it, or "
                f"stop it with `%ktrain cancel {job.name} --run {job.warm.active}`."
            )
        plan = read_plan(self.folders.job_dir(job.name))
        spec = spec.evolve(name=job.name)
        request = LocalRequest(
            master_port=plan.master_port,
            marker=plan.marker,
            nodes=(),
            max_restarts=0,
            warm=True,
            reuse=True,
        )
        files = dict(program.files)  # (--deepspeed is refused on a warm job: check_warm)
        runs = (job.warm.runs if job.warm else 0) + 1
        text = (
            f"# {job.name}: run {runs} on the warm job ({spec.nodes} node(s) x {spec.nproc} "
            f"process(es), ready): only the program travels, to its runs/{runs}/code folder;\n"
            "# each node's agent forks the ranks from its interpreter (torch already imported)\n"
            + "".join(f"#   {rel} ({len(data)} bytes)\n" for rel, data in sorted(files.items()))
        )
        note = f"run on the warm job {job.name!r} (same shape: its nodes are ready)"
        return LaunchPlan(spec, program, BACKEND, request, text, files, (note,))

    def order_run(self, job_dir: Path, files: Mapping[str, bytes]) -> int:
        """Write the next run's program to ``runs/N/code`` and order it (``control.json``):
        the nodes' agents start it at once. The run's number."""
        runs = job_dir / "runs"
        make_private_dirs(runs)
        number = 1 + max((int(p.name) for p in runs.iterdir() if p.name.isdigit()), default=0)
        while True:
            try:
                (runs / str(number)).mkdir(mode=0o700)
                break
            except FileExistsError:  # another kernel ordered one meanwhile
                number += 1
        code_dir = runs / str(number) / "code"
        code_dir.mkdir(mode=0o700)
        for rel, data in files.items():
            make_private_dirs((code_dir / rel).parent)
            write_private(code_dir / rel, data)
        change_state(runs / str(number), state=PENDING, run=number)
        order = json.dumps({"version": 1, "run": number, "code_dir": str(code_dir)}).encode()
        replace_private(job_dir / "control.json", order)
        return number

    def latest_run(self, name: str) -> int | None:
        raw = self.folders.state(name).warm
        if raw is None:
            try:
                return max(int(p.name) for p in (self.folders.job_dir(name) / "runs").iterdir())
            except (OSError, ValueError):
                return None
        return raw.runs or None

    def run_status(self, name: str, run: int) -> JobStatus:
        job = self.folders.status(name)
        run_dir = self.folders.job_dir(name) / "runs" / str(run)
        raw = read_state(run_dir)
        if raw is None:
            raise JobNotFound(f"The warm job {name!r} has no run {run}.")
        if raw.state not in TERMINAL_STATES and job.terminal:
            why = job.message or job.reason or job.state
            ended = CANCELLED if job.state == CANCELLED else FAILED
            raw = replace(raw, state=ended, reason=job.reason, message=f"the warm job ended: {why}")
        elif raw.state == PENDING and not raw.message:  # say what it waits for, not "Pending"
            raw = replace(raw, message=run_waiting(job.warm))
        return to_status(name, raw, self.folders.shape(name))

    def run_log_sources(self, name: str, run: int) -> list[LogSource]:
        nodes = self.folders.meta(name)["nodes"]
        folder = self.folders.job_dir(name) / "runs" / str(run)
        return [FileLogSource(folder / f"node-{i}.log", f"{name}-node-{i}") for i in range(nodes)]

    def read_run_logs(self, name: str, run: int) -> Iterator[tuple[str, str]]:
        if not (self.folders.job_dir(name) / "runs" / str(run)).is_dir():
            raise JobNotFound(f"The warm job {name!r} has no run {run}.")
        for source in self.run_log_sources(name, run):
            for line in source.finish():
                yield source.replica, line

    def cancel_run(self, name: str, run: int) -> None:
        """Ask every node to stop the run, and wait until they did (the nodes stay warm)."""
        job_dir = self.folders.job_dir(name)
        if self.run_status(name, run).terminal:
            return
        abort_run(job_dir, run, CANCELLED_BY_USER)
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.run_status(name, run).terminal:
                return
            time.sleep(0.05)
        change_state(
            job_dir / "runs" / str(run), state=CANCELLED, reason=CANCELLED_REASON,
            finished=time.time(), message="its nodes did not answer",
        )  # fmt: skip

    def set_idle_limit(self, name: str, seconds: float) -> JobStatus:
        """``%ktrain warm NAME --idle``: the warm job's idle limit (0 ends it now)."""
        status = self.folders.status(name)
        if status.warm is None:
            raise SpecError(f"{name!r} is no warm job: only a --warm job has an idle limit.")
        if status.terminal:
            raise SpecError(f"The warm job {name!r} already ended ({describe(status)}).")
        data = json.dumps({"version": 1, "idle_limit_s": float(seconds)}).encode()
        replace_private(self.folders.job_dir(name) / "warm.json", data)
        if seconds <= 0:
            deadline = time.monotonic() + CANCEL_TIMEOUT_S
            while time.monotonic() < deadline and not self.folders.status(name).terminal:
                time.sleep(0.05)
        return self.folders.status(name)
