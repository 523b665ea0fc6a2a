"""The local jobs as their folders say (``$KTRAIN_HOME/jobs/NAME``): :class:`JobFolders`, what
:class:`~.backend.LocalBackend` and its warm part (:mod:`.warm_runs`) both read, each handed the
same one: a job's folder, its state (and the truth about it when its supervisor is gone), its
status, its shape and what it was started as (``job.json``), and every job of the store.

Reading only, apart from the status of a job whose supervisor is gone, which nobody else can
say: the processes of the job are found by its marker (:mod:`.procs`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import JobNotFound, SpecError
from ...jobs import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    TERMINAL_STATES,
    JobShape,
    JobState,
    JobStatus,
    ReplicaPhase,
    ReplicaStatus,
    WarmInfo,
    complete_exit_codes,
)
from ...kinds import DEFAULT_KIND
from ...spec.job import check_job_name
from ...store.files import store_error
from ...store.home import jobs_dir
from ...store.jobdirs import job_marker
from ...store.versions import versioned
from ...words import warm_starting
from .procs import marked_pids, process_start
from .request import PLAN
from .state import LocalState, StateError, WarmState, read_state

__all__ = ["JOB_META", "JOB_META_VERSION", "JobFolders", "alive", "to_status", "warm_info"]

JOB_META = "job.json"
JOB_META_VERSION = 1  # job.json's; read by the job store's rule (store.versions)


@dataclass(frozen=True)
class JobFolders:
    """The local jobs of the store at ``home`` (its ``jobs`` folder)."""

    home: Path

    def job_dir(self, name: str) -> Path:
        """The job's folder, always inside the store: ``name`` must be a valid job name."""
        return jobs_dir(self.home) / check_job_name(name)

    def state(self, name: str) -> LocalState:
        """The job's ``state.json`` as its supervisor left it; :class:`JobNotFound` when the
        store holds no job of the name."""
        job_dir = self.job_dir(name)
        if not job_dir.is_dir():
            raise JobNotFound(
                f"No local job named {name!r}. `%ktrain list` shows the jobs this machine knows."
            )
        try:
            return read_state(job_dir) or LocalState()
        except OSError as exc:
            raise store_error(job_dir, exc, "read") from None

    def status(self, name: str) -> JobStatus:
        """The job's status: its state, or the truth about it when its supervisor is gone."""
        raw = self.state(name)
        if raw.state not in TERMINAL_STATES and not alive(raw):
            raw = self._without_supervisor(name, raw)
        return to_status(name, raw, self.shape(name))

    def list_jobs(self) -> list[JobStatus]:
        """Every job of the store, oldest first (folders that are no job of this version's are
        left out: ``status NAME`` says why)."""
        folder = jobs_dir(self.home)
        try:
            entries = sorted(_by_age(folder))
        except OSError as exc:
            raise store_error(folder, exc, "read") from None
        out = []
        for _, entry in entries:
            if (entry / PLAN).exists():
                try:
                    out.append(self.status(entry.name))
                except (JobNotFound, SpecError, StateError):
                    continue  # removed meanwhile, a folder that is no job of ours, or a newer
                    # version's job (`status NAME` says which)
        return out

    def meta(self, name: str) -> dict[str, Any]:
        """What the job was started as (``job.json``: kind, nodes, processes, GPUs, warm);
        OSError or ValueError when it cannot be read (a newer version's: one line saying so,
        :class:`~jupyter_ktrain.store.versions.StoreVersionError`)."""
        raw = json.loads((self.job_dir(name) / JOB_META).read_text())
        return versioned(raw, f"{name}/{JOB_META}", "job", JOB_META_VERSION)

    def shape(self, name: str) -> JobShape | None:
        """The shape the job was started with; None when its ``job.json`` cannot be read."""
        try:
            meta = self.meta(name)
        except (OSError, ValueError):
            return None
        return JobShape(
            kind=str(meta.get("kind", DEFAULT_KIND)),
            nodes=int(meta.get("nodes", 1)),
            procs_per_node=int(meta.get("nproc", 1)),
            gpus_per_node=int(meta.get("gpus", 0)),
        )

    def running(self, name: str) -> list[int]:
        """The processes of the job that run now, wherever they went (by its marker)."""
        marker = job_marker(self.job_dir(name))
        return marked_pids(marker) if marker else []

    def _without_supervisor(self, name: str, raw: LocalState) -> LocalState:
        """The truth about a job whose supervisor is gone and which has no final state (its
        watchdog is stopping it, or was killed too): Running while any of its processes runs,
        else Failed, with the reason."""
        pid = raw.supervisor_pid
        running = len(self.running(name))
        if running:
            if raw.reason.startswith("Supervisor"):
                return replace(raw, state=RUNNING)  # the watchdog said why, and is stopping them
            return replace(
                raw,
                state=RUNNING,
                reason="SupervisorLost",
                message=f"its supervisor (pid {pid}) is gone, but {running} process(es) of "
                f"the job still run: `%ktrain cancel {name}` stops them",
            )
        who = raw.supervisor_end or (
            f"its supervisor (pid {pid}) ended (it was killed, or the machine restarted)"
        )
        return replace(
            raw,
            state=FAILED,
            reason=raw.reason if raw.supervisor_end else "SupervisorLost",
            message=f"{who} before the job ended; none of the job's processes runs any more",
        )


def alive(raw: LocalState) -> bool:
    """Whether the supervisor that wrote ``raw`` still runs (not a later process with its pid)."""
    pid = raw.supervisor_pid
    if pid is None:
        return True  # just scheduled: the supervisor has not written its state yet
    started = process_start(pid)
    return started is not None and raw.supervisor_start in (None, started)


def to_status(name: str, raw: LocalState, shape: JobShape | None) -> JobStatus:
    """A job's (or a warm job's run's) ``state.json`` as a :class:`JobStatus`."""
    replicas = tuple(
        ReplicaStatus(
            name=f"{name}-node-{i}",
            phase=n.phase or ReplicaPhase(_phase(n.exit_code, raw.state)),
            restarts=n.restarts,
            node="127.0.0.1",
            exit_code=n.exit_code,
            last_event=n.last_event,
        )
        for i, n in enumerate(raw.nodes)
    )
    warm = warm_info(raw.warm, shape) if raw.warm is not None else None
    state, message = raw.state, raw.message
    if warm is not None and warm.starting and state == RUNNING:
        # its nodes still import torch: no run can go yet, so every view says it waits (as
        # its first run does), not that it runs
        state, message = PENDING, message or warm_starting(warm)
    status = JobStatus(
        name=name,
        state=state,
        reason=raw.reason,
        message=message,
        exit_codes=dict(raw.exit_codes),
        replicas=replicas,
        started=raw.started,
        finished=raw.finished,
        failed_rank=raw.failed_rank,
        progress=raw.progress,
        max_restarts=raw.max_restarts,
        warm=warm,
    )
    return complete_exit_codes(status, shape.procs_per_node if shape else 1)


def warm_info(raw: WarmState, shape: JobShape | None) -> WarmInfo:
    """A warm job's state as its status says it (its GPUs from its shape)."""
    gpus = shape.nodes * shape.gpus_per_node if shape is not None else 0
    return WarmInfo(
        runs=raw.runs,
        active=raw.active,
        idle_since=raw.idle_since,
        idle_limit_s=raw.idle_limit_s,
        gpus=gpus,
        nodes=shape.nodes if shape is not None else 0,
        ready=raw.ready,
    )


def _by_age(jobs_dir: Path) -> Iterator[tuple[float, Path]]:
    """(modification time, folder) of each job folder; nothing when there is no store yet."""
    if not jobs_dir.is_dir():
        return
    for entry in jobs_dir.iterdir():
        with contextlib.suppress(FileNotFoundError):  # deleted while listing
            yield entry.stat().st_mtime, entry


def _phase(exit_code: int | None, job_state: JobState) -> JobState:
    """A node's phase from its exit code, where the supervisor gave it none."""
    if exit_code is None:
        return job_state
    if exit_code == 0:
        return SUCCEEDED
    return job_state if job_state == CANCELLED else FAILED
