"""Tracking wired to a followed job: where the cell and ``%ktrain attach`` hook in.

- :func:`check` before anything is created: the tracking server the job would use (``--mlflow``,
  else ``%ktrain config mlflow=URI``), refused with one clear error when MLflow is not
  installed;
- :func:`started` once the job is scheduled: its record in the job store (params, code hash,
  where it is tracked), and the code and rendered objects to log as artifacts; a run of a
  warm job is tracked as a job of its own (its record beside the job's, :func:`record_key`);
- :func:`sink_for` wraps the follow loop's sink: the lines go to the view as before, and to the
  job's MLflow run (:class:`TrackingSink`); a re-attached kernel resumes the same run;
- :func:`finished` after the follow loop: result scalars, each rank's log, the final state,
  and one line saying where the run is (or what is still being sent).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from ..config import OFF, check_uri, load_config
from ..extras import require
from ..jobs import SUCCEEDED
from ..store.records import (
    MlflowState,
    RunRecord,
    hold,
    read_run,
    record_name,
    release,
    remove,
    write_run,
)
from ..tracking.cpu import SpareCpu
from ..tracking.params import code_hash, job_params
from ..tracking.points import Point, Reading, RecordReader

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import JobStatus
    from ..monitor.follow_loop import Sink
    from ..spec.job import JobSpec
    from ..tracking.mlflow_run import MlflowRun

__all__ = [
    "TrackingSink",
    "check",
    "check_uri",
    "detached",
    "finished",
    "forget",
    "record_key",
    "settings",
    "sink_for",
    "started",
    "under",
]

DEFAULT_EXPERIMENT = "ktrain"
FINISH_WAIT_S = 30.0


def settings(spec: JobSpec) -> tuple[str, str] | None:
    """``(tracking URI, experiment)`` for ``spec``'s job, or None when it is not tracked."""
    cfg = load_config()
    uri = spec.mlflow if spec.mlflow is not None else cfg.mlflow
    if not uri or uri.strip().lower() in OFF:
        return None
    return uri.strip(), spec.experiment or cfg.mlflow_experiment or DEFAULT_EXPERIMENT


def check(spec: JobSpec) -> tuple[str, str] | None:
    """:func:`settings`, refused before the job starts when MLflow is not installed. The
    client is imported here, before the job runs: its import (a second of CPU) would otherwise
    come in the sender's thread while the job starts on this machine."""
    where = settings(spec)
    if where is None:
        return None
    require(
        "mlflow",
        f"Tracking the job in MLflow at {where[0]}",
        otherwise="run with --mlflow off (`%ktrain config mlflow=` turns it off for every job)",
    )
    import mlflow.tracking  # noqa: F401

    return where


def record_key(job: Job) -> str:
    """Where the job's record is kept: under its name; a warm job's run under
    ``NAME/runs/N``, each run an MLflow run of its own."""
    return record_name(job.name, job.run)


def started(job: Job, given: Mapping[str, Any], say: Callable[[str], None] = print) -> None:
    """Write the record of a job (or a warm job's run) just scheduled (replacing an earlier
    job's of that name); a store that cannot be written is said, and the job runs on
    untracked."""
    plan = job.plan
    if plan is None:
        return
    where = check(plan.spec)
    record = RunRecord(
        name=job.name,
        backend=job.backend.name,
        started=time.time(),
        params=job_params(plan.spec, given, plan.program.source),
        code_sha256=code_hash(dict(plan.files) or plan.program.files),
        run=job.run,
        mlflow=MlflowState(where[0], where[1]) if where is not None else None,
    )
    try:
        write_run(job.backend.name, record_key(job), record)
    except OSError as exc:
        say(f"warning: cannot keep the job's record ({exc}); it runs on, untracked.")


def under(job: Job, tags: Mapping[str, str]) -> None:
    """Tags the tracked job's run is to carry beside its own, kept in its record before the
    run is made (a sweep's trial: ``mlflow.parentRunId``, its sweep, its number). An untracked
    job, or a store that cannot be written: nothing."""
    key = record_key(job)
    record = read_run(job.backend.name, key)
    if record is None or record.mlflow is None:
        return
    record = dataclasses.replace(record, mlflow=dataclasses.replace(record.mlflow, tags=tags))
    with contextlib.suppress(OSError):
        write_run(job.backend.name, key, record)


class TrackingSink:
    """A follow-loop sink that passes everything to ``inner`` and tracks the job in ``run``;
    each poll (``tick``) shows what the sender has to say in the cell."""

    def __init__(
        self, inner: Sink, run: MlflowRun, say: Callable[[str], None], held: int | None = None
    ) -> None:
        self.inner, self.run, self.say = inner, run, say
        self.held = held  # the right to log the job (:func:`.store.hold`), given back at the end
        self.reader = RecordReader()
        self._nodes: dict[str, int] = {}
        self._restarts = 0

    def lines(self, replica: str, lines: list[Any]) -> None:
        self.inner.lines(replica, lines)
        node = self._nodes.setdefault(replica, len(self._nodes))
        # read by the sender when it sends: on a busy machine, not while the job runs
        self.run.add_later(partial(self._read, list(lines), time.time(), node), len(lines))

    def _read(self, lines: list[Any], now: float, node: int) -> Reading:
        out = Reading()
        for line in lines:
            got = self.reader.read(line, now, node)
            out.points += got.points
            out.tags.update(got.tags)
        return out

    def status(self, status: JobStatus) -> None:
        self.inner.status(status)
        if status.restarts > self._restarts:
            self._restarts = status.restarts
            self.run.tag("ktrain.restarts", str(status.restarts))

    def tick(self) -> None:
        tick = getattr(self.inner, "tick", None)
        if tick is not None:
            tick()
        for warning in self.run.take_warnings():
            self.say(f"warning: {warning}")


def sink_for(job: Job, inner: Sink, say: Callable[[str], None]) -> Sink:
    """``inner``, wrapped to track the job when its record says where (a job started with
    tracking, also after a kernel restart: the same run, no point twice)."""
    key = record_key(job)
    record = read_run(job.backend.name, key)
    if record is None or record.mlflow is None:
        return inner
    if record.mlflow.finished:
        return inner  # everything was sent
    held = hold(job.backend.name, key)
    if held is None:
        say(
            f"MLflow: {job.name!r} is being logged by another process (the Jupyter server, "
            "while the side panel follows it, or another kernel); this one does not send it."
        )
        return inner
    record = read_run(job.backend.name, key) or record  # as the last holder left it
    if record.mlflow is None or record.mlflow.finished:
        release(held)
        return inner
    from ..tracking.mlflow_run import MlflowRun

    run = MlflowRun(
        job.backend.name,
        job.name,
        record,
        run=job.run,
        new_params=record.params,
        tags={"ktrain.code_sha256": record.code_sha256, **(record.mlflow.tags or {})},
        spare=SpareCpu().spare if job.backend.ranks_here else None,
    )
    if job.plan is not None:
        run.artifact("ktrain/program.py", job.plan.program.source)
        run.artifact("ktrain/launch.txt", job.plan.describe())
    return TrackingSink(inner, run, say, held)


def detached(sink: Sink) -> None:
    """The follower stops watching (Ctrl-C): send what is held, briefly, then stop."""
    if isinstance(sink, TrackingSink):
        sink.run.close(timeout=5.0)
        release(sink.held)


def finished(
    sink: Sink,
    job: Job,
    status: JobStatus,
    say: Callable[[str], None],
    wait_s: float = FINISH_WAIT_S,
) -> None:
    """The job ended: its result scalars, each rank's log and its final state go to the run;
    wait up to ``wait_s`` s for the sender, then say where the run is."""
    if not isinstance(sink, TrackingSink):
        return
    if _finish(sink, job, status, say, wait_s):
        release(sink.held)  # while the sender still sends, no other process takes over


def _finish(
    sink: TrackingSink, job: Job, status: JobStatus, say: Callable[[str], None], wait_s: float
) -> bool:
    run = sink.run
    if status.state == SUCCEEDED:
        run.add(Reading(points=_result_points(job, status)))
    for path, text in _rank_logs(job):
        run.artifact(path, text)
    run.end(status.state, status.finished)
    done = run.wait(wait_s)
    for warning in run.take_warnings():
        say(f"warning: {warning}")
    dropped = f"; {run.dropped:,} points were dropped (buffer full)" if run.dropped else ""
    if done:
        run.close()
        held = (
            f"; sending waited {run.held_s:.0f} s for spare CPU, not to slow the job"
            if run.held_s >= 1
            else ""
        )
        say(f"MLflow: {run.link} ({run.sent.count():,} points{held}){dropped}")
        return True
    else:
        say(
            f"MLflow at {run.uri} has not taken everything yet: {run.pending:,} items are still "
            f"being sent in the background{dropped}. If this kernel stops first, "
            f"`%ktrain attach {job.name}` sends the rest (never a point twice)."
        )
        return False


def _result_points(job: Job, status: JobStatus) -> list[Point]:
    """Rank 0's result names bound to plain numbers, as ``result/NAME`` at step 0."""
    try:
        outputs = job.outputs
    except Exception:  # an unreadable result is the cell's problem, not the tracking's
        return []
    ms = int((status.finished or time.time()) * 1000)
    return [
        Point(f"result/{name}", float(value), 0, ms)
        for name, value in outputs.items()
        if name != "_" and isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


def _rank_logs(job: Job) -> list[tuple[str, str]]:
    """``logs/rank{R}.log`` for every rank that wrote a line, and ``logs/job.log``: all."""
    shape = job.shape
    if job.plan is not None:
        world = job.plan.spec.world_size
    elif shape is not None:
        world = shape.nodes * shape.procs_per_node
    else:
        world = 1
    try:
        out = [("logs/job.log", job.logs())]
        out += [(f"logs/rank{r}.log", job.logs(rank=r)) for r in range(world)]
    except Exception:  # the logs are gone (a cluster job deleted meanwhile): nothing to add
        return []
    return [(path, text) for path, text in out if text]


def forget(backend: str, name: str) -> str:
    """Remove the job's record from the job store (``%ktrain delete``); what was removed where,
    as the end of a sentence ("" when it had none). Its MLflow run is kept: the tracking
    server's, not the job's."""
    record = read_run(backend, name)
    folder = remove(backend, name)
    if folder is None:
        return ""
    said = f" Removed its record (params, tracking state) from {folder}."
    tracked = record.mlflow if record is not None else None
    if tracked is not None and tracked.run_id:
        said += f" Its MLflow run {tracked.run_id} at {tracked.uri} is kept."
    return said
