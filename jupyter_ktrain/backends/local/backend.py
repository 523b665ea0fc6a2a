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
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import BackendError, JobNotFound, SpecError
from ...jobs import (
    CANCELLED,
    CANCELLED_REASON,
    FAILED,
    RUNNING,
    SUCCEEDED,
    TERMINAL_STATES,
    JobShape,
    JobState,
    JobStatus,
    ReplicaPhase,
    ReplicaStatus,
    complete_exit_codes,
)
from ...kinds import DEFAULT_KIND, KIND_TABLE
from ...pod.agent.warm import CONTROL_ENV
from ...pod.checkpoint import CHECKPOINTS_ENV
from ...pod.launch import node_command, operator_env
from ...spec import check_job_name
from ..base import Backend, Job, LaunchPlan, LogSource, Request
from ..capabilities import ShapeKnown, WarmCapable
from ..jobstore import (
    create_job_dir,
    job_marker,
    make_private_dirs,
    open_append,
    release_reserve,
    store_error,
    write_private,
)
from ..warm import warm_shape
from .gpus import machine_gpus, split_gpus
from .logs import FileLogSource, LogIndex
from .plan import (
    cluster_only_settings,
    deepspeed_files,
    describe_plan,
    free_port,
    local_max_restarts,
    metrics_env,
    package_root,
)
from .procs import MARKER_ENV, marked_pids, process_start, stop_marked
from .request import PLAN, LocalRequest, NodeLaunch, read_plan
from .state import LocalState, StateError, change_state, read_state
from .warm import LocalWarm, warm_info

if TYPE_CHECKING:
    from ...capture import CapturedProgram
    from ...pod.agent.sampler import GpuInfo
    from ...spec import JobSpec

__all__ = ["LocalBackend", "ktrain_home"]

CANCEL_TIMEOUT_S = 15.0
# between stopping every node after a fault and starting them all again: a moment for the
# machine to settle (the supervisor keeps it, so a cancel in it starts nothing more)
RESTART_DELAY_S = 1.0


def ktrain_home() -> Path:
    return Path(os.environ.get("KTRAIN_HOME") or Path.home() / ".ktrain")


class LocalBackend(Backend, WarmCapable, ShapeKnown):
    """``gpus`` lists this machine's GPUs (a seam for tests; default :func:`machine_gpus`,
    asked only when a job wants GPUs)."""

    name = "local"
    rdma_capable = False  # --rdma is a pod network setting; local nodes talk over loopback

    def __init__(
        self,
        home: Path | None = None,
        python: str | None = None,
        gpus: Callable[[], list[GpuInfo]] | None = None,
    ):
        self.home = home or ktrain_home()
        self.python = python or sys.executable
        self._gpus = gpus or machine_gpus
        self._log_index = LogIndex()
        self.warm: LocalWarm = LocalWarm(self)  # the runs of --warm jobs

    # -- registry -------------------------------------------------------------------------
    def job_dir(self, name: str) -> Path:
        """The job's folder, always inside the store: ``name`` must be a valid job name."""
        return self.home / "jobs" / check_job_name(name)

    def _state(self, name: str) -> LocalState:
        job_dir = self.job_dir(name)
        if not job_dir.is_dir():
            raise JobNotFound(
                f"No local job named {name!r}. `%ktrain list` shows the jobs this machine knows."
            )
        try:
            return read_state(job_dir) or LocalState()
        except OSError as exc:
            raise store_error(job_dir, exc, "read") from None

    def _ports_in_use(self) -> set[int]:
        ports = set()
        for status in self.list_jobs():
            if not status.terminal:
                job_dir = self.job_dir(status.name)
                try:
                    ports.add(read_plan(job_dir).master_port)
                except (OSError, ValueError):  # PlanError too: a folder we cannot read
                    continue
                with contextlib.suppress(OSError, ValueError):  # StateError too
                    moved = (read_state(job_dir) or LocalState()).master_port  # on a restart
                    ports.update([moved] if moved else [])
        return ports

    # -- plan -----------------------------------------------------------------------------
    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[LocalRequest]:
        if spec.warm:
            return self.warm.dryrun(spec, program)
        return self._dryrun(spec, program)

    def _dryrun(
        self,
        spec: JobSpec,
        program: CapturedProgram,
        warm_notes: tuple[str, ...] = (),
        replaces: str = "",
    ) -> LaunchPlan[LocalRequest]:
        kind = KIND_TABLE[spec.kind]
        asked = spec.nodes
        if kind.driver_only:  # one driver; ray.init() in it starts Ray on this machine
            spec = spec.evolve(nodes=1, procs_per_node=1)
        job_dir = self.job_dir(spec.name)
        code_dir = job_dir / "code"
        port = free_port(self._ports_in_use())
        marker = uuid.uuid4().hex
        python_path = os.pathsep.join(
            p for p in (str(code_dir), package_root(), os.environ.get("PYTHONPATH", "")) if p
        )
        gpu_env = split_gpus(spec, self._gpus() if spec.resources.gpus else [])
        nodes = []
        for node in range(spec.nodes):
            env = {
                **operator_env(
                    nnodes=spec.nodes,
                    nproc_per_node=spec.nproc,
                    node_rank=node,
                    master_addr="127.0.0.1",
                    master_port=port,
                ),
                "PYTHONPATH": python_path,
                "PYTHONUNBUFFERED": "1",
                # torchrun's default for several processes, set here so it does not print a
                # banner about it; a value from --env or the kernel's environment wins
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
                "KTRAIN_JOB_NAME": spec.name,
                # ktrain.checkpoint(): in the job's folder, so a restarted node finds it
                CHECKPOINTS_ENV: str(job_dir / "checkpoints"),
                **gpu_env[node],
                **metrics_env(spec, node),
                **dict(kind.driver_env),
                MARKER_ENV: marker,
                **spec.env_dict,
            }
            argv = node_command(str(code_dir), python=self.python)
            if spec.warm:  # a warm agent: its runs' programs come through the job's folder
                argv = [self.python, "-m", "jupyter_ktrain.pod.agent.warm"]
                env["PYTHONPATH"] = python_path.split(os.pathsep, 1)[1]  # no code dir: per run
                env[CONTROL_ENV] = str(job_dir)
                env.pop("KTRAIN_METRICS_PORT", None)
            if spec.deepspeed is not None:
                env.setdefault("KTRAIN_DEEPSPEED_CONFIG", str(code_dir / "ds_config.json"))
            nodes.append(NodeLaunch(tuple(argv), env, str(code_dir)))
        request = LocalRequest(
            master_port=port,
            marker=marker,
            nodes=tuple(nodes),
            max_restarts=0 if spec.warm else local_max_restarts(spec),
            restart_delay_s=RESTART_DELAY_S,
            warm=spec.warm,
            replaces=replaces,
        )
        files = {**program.files, **deepspeed_files(spec, program.source)}
        ignored = cluster_only_settings(spec)
        unlimited = "; nothing limits a local job's memory" if "-memory" in str(ignored) else ""
        said = f"local run: {', '.join(ignored)} apply on --backend kubernetes only{unlimited}"
        text = describe_plan(spec, nodes)
        notes: tuple[str, ...] = (*warm_notes, *((said,) if ignored else ()))
        if kind.driver_only:
            notes = (
                *notes,
                f"local run: the {spec.kind}'s driver runs once here; ray.init() in it starts "
                f"Ray on this machine's CPUs in place of the {asked} node(s) a cluster gives it",
            )
        return LaunchPlan(spec, program, self.name, request, text, files, notes)

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
        job_dir = create_job_dir(self.home / "jobs", check_job_name(name))  # exclusive
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
                    "jupyter_ktrain.backends.local.supervisor",
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
            "name": spec.name,
            "kind": spec.kind,
            "nodes": spec.nodes,
            "nproc": spec.nproc,
            "gpus": spec.resources.gpus,
        }
        if plan.request.warm:
            meta.update(warm=True, warm_shape=warm_shape(spec))
        write_private(job_dir / "job.json", json.dumps(meta, indent=1).encode())
        write_private(job_dir / PLAN, json.dumps(plan.request.to_json(), indent=1).encode())
        write_private(job_dir / "dry-run.txt", plan.text.encode())

    def status(self, name: str) -> JobStatus:
        raw = self._state(name)
        if raw.state not in TERMINAL_STATES and not self._alive(raw):
            raw = self._without_supervisor(name, raw)
        return self._to_status(name, raw, self.shape(name))

    def _to_status(self, name: str, raw: LocalState, shape: JobShape | None) -> JobStatus:
        """A job's (or a warm job's run's) ``state.json`` as a :class:`JobStatus`."""
        replicas = tuple(
            ReplicaStatus(
                name=f"{name}-node-{i}",
                phase=ReplicaPhase(n.phase or _phase(n.exit_code, raw.state)),
                restarts=n.restarts,
                node="127.0.0.1",
                exit_code=n.exit_code,
                last_event=n.last_event,
            )
            for i, n in enumerate(raw.nodes)
        )
        status = JobStatus(
            name=name,
            state=raw.state,
            reason=raw.reason,
            message=raw.message,
            exit_codes=dict(raw.exit_codes),
            replicas=replicas,
            started=raw.started,
            finished=raw.finished,
            failed_rank=raw.failed_rank,
            progress=raw.progress,
            max_restarts=raw.max_restarts,
            warm=warm_info(raw.warm, shape) if raw.warm is not None else None,
        )
        return complete_exit_codes(status, shape.procs_per_node if shape else 1)

    def _without_supervisor(self, name: str, raw: LocalState) -> LocalState:
        """The truth about a job whose supervisor is gone and which has no final state (its
        watchdog is stopping it, or was killed too): Running while any of its processes runs,
        else Failed, with the reason."""
        pid = raw.supervisor_pid
        running = len(self._running(name))
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

    def _alive(self, raw: LocalState) -> bool:
        pid = raw.supervisor_pid
        if pid is None:
            return True  # just scheduled: the supervisor has not written its state yet
        started = process_start(pid)
        return started is not None and raw.supervisor_start in (None, started)

    def _running(self, name: str) -> list[int]:
        """The processes of the job that run now, wherever they went (by its marker)."""
        marker = job_marker(self.job_dir(name))
        return marked_pids(marker) if marker else []

    def cancel(self, name: str) -> None:
        """Stop every process of the job, whoever holds them. The supervisor does it and writes
        Cancelled; when it is gone (killed), this stops what is left and writes Cancelled with
        what it found. Raises :class:`BackendError` only when processes could not be stopped."""
        raw = self._state(name)
        marker = job_marker(self.job_dir(name))
        if marker is None or (raw.state in TERMINAL_STATES and not marked_pids(marker)):
            return  # ended, or not started yet (its folder is being made)
        deadline = time.monotonic() + CANCEL_TIMEOUT_S
        while raw.supervisor_pid is None and time.monotonic() < deadline:
            time.sleep(0.05)  # scheduled a moment ago: its supervisor is starting
            raw = self._state(name)
        pid = raw.supervisor_pid
        supervised = self._alive(raw) and pid is not None
        if pid is not None and supervised:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            while time.monotonic() < deadline and self._alive(self._state(name)):
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
        if supervised and not self._alive(self._state(name)):
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
        try:
            shutil.rmtree(job_dir)
        except FileNotFoundError:
            return  # deleted meanwhile by another command
        except OSError as exc:
            raise store_error(job_dir, exc, "delete a job from") from None

    def list_jobs(self) -> list[JobStatus]:
        jobs_dir = self.home / "jobs"
        try:
            entries = sorted(_by_age(jobs_dir))
        except OSError as exc:
            raise store_error(jobs_dir, exc, "read") from None
        out = []
        for _, entry in entries:
            if (entry / PLAN).exists():
                try:
                    out.append(self.status(entry.name))
                except (JobNotFound, SpecError, StateError):
                    continue  # removed meanwhile, a folder that is no job of ours, or a newer
                    # version's job (`status NAME` says which)
        return out

    def shape(self, name: str) -> JobShape | None:
        try:
            meta = json.loads((self.job_dir(name) / "job.json").read_text())
        except (OSError, ValueError):
            return None
        return JobShape(
            kind=str(meta.get("kind", DEFAULT_KIND)),
            nodes=int(meta.get("nodes", 1)),
            procs_per_node=int(meta.get("nproc", 1)),
            gpus_per_node=int(meta.get("gpus", 0)),
        )

    def log_sources(self, name: str) -> list[LogSource]:
        nodes = json.loads((self.job_dir(name) / "job.json").read_text())["nodes"]
        return [
            FileLogSource(self.job_dir(name) / f"node-{i}.log", f"{name}-node-{i}")
            for i in range(nodes)
        ]

    def read_logs(self, name: str) -> Iterator[tuple[str, str]]:
        self._state(name)
        for source in self.log_sources(name):
            for line in source.finish():
                yield source.replica, line

    def read_logs_timed(self, name: str) -> Iterator[tuple[float | None, str, str]]:
        """Lines with the time the supervisor wrote each (``node-K.times``, one per line)."""
        self._state(name)
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
        self._state(name)
        for i, source in enumerate(self.log_sources(name)):
            assert isinstance(source, FileLogSource)
            times = self.job_dir(name) / f"node-{i}.times"
            for t, index, line in self._log_index.read(
                source.path, times, start.get(source.replica, 0), limit
            ):
                yield t, source.replica, index, line


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
