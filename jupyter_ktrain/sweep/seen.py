"""A sweep as the line commands see it from its record in the job store, after the fact or
from another kernel: ``%ktrain attach SWEEP`` (its table as it stands, its state as seen, the
trials whose jobs still run and how to follow or cancel them, the :class:`Sweep` with handles
on the jobs that still exist), ``%ktrain delete SWEEP``, the sweeps' rows of ``%ktrain list``
and the trials ``%ktrain compare SWEEP`` compares.
"""

from __future__ import annotations

import dataclasses

from ..backends.base import Backend, Job
from ..backends.capabilities import job_shape
from ..errors import JobNotFound, KtrainError, SpecError
from ..jobs import TrialState
from ..store.sweeps import SweepRecord, SweepState, remove_sweep
from ..tracking.side_by_side import Entry
from .record import DONE, INTERRUPTED, RUNNING, STOPPED, seen_state, sweep_of
from .trials import Sweep, Trial

__all__ = ["attach_text", "compare_entries", "delete_sweep", "list_row", "sweep_jobs"]


def sweep_jobs(record: SweepRecord) -> list[str]:
    """The jobs the sweep's trials ran as (a warm sweep's warm jobs), in name order."""
    return sorted({r.job for r in record.rows if r.job})


def _head(record: SweepRecord, state: SweepState) -> str:
    ended = sum(r.state != TrialState.RUNNING for r in record.rows)
    name, backend = record.name, record.backend or "?"
    counted = f"{ended} of {record.trials} trial(s) ended"
    why = {
        RUNNING: f"Running in process {record.pid} on {record.host} (another "
        f"kernel or script): {counted} so far; this is its record as it stands",
        DONE: f"Done: {counted}",
        STOPPED: f"Stopped at a failed trial (--stop-on-failure): {counted}",
        INTERRUPTED: f"Interrupted: {counted}"
        + (
            "; the process that ran it is gone (a kernel restart?)"
            if record.state == RUNNING
            else ""
        ),
    }.get(state, f"{state}: {counted}")
    return f"Sweep {name!r} ({backend}): {why}."


def _alive(backend: Backend, job: str, run: int | None) -> bool:
    """Whether trial's job (its run, on a warm job) still runs."""
    try:
        return not Job(job, backend, run=run).status().terminal
    except KtrainError:
        return False


def _handled(trial: Trial, backend: Backend, exists: dict[str, bool]) -> Trial:
    """``trial`` with a handle on its job, where that job still exists."""
    if not trial.job:
        return trial
    if trial.job not in exists:
        try:
            backend.status(trial.job)
            exists[trial.job] = True
        except KtrainError:
            exists[trial.job] = False
    if not exists[trial.job]:
        return trial
    handle = Job(trial.job, backend, shape=job_shape(backend, trial.job), run=trial.run)
    return dataclasses.replace(trial, handle=handle)


def attach_text(record: SweepRecord, backend: Backend) -> tuple[str, Sweep]:
    """``%ktrain attach SWEEP``: what to say, and the :class:`Sweep` as it stands."""
    state = seen_state(record)
    kept = sweep_of(record)
    exists: dict[str, bool] = {}
    sweep = dataclasses.replace(
        kept, trials=tuple(_handled(t, backend, exists) for t in kept.trials)
    )
    lines = [_head(record, state), sweep.table()]
    if state != RUNNING:
        for t in sweep.trials:
            if t.state != TrialState.RUNNING or not _alive(backend, t.job, t.run):
                continue
            where = f"{t.job!r} run {t.run}" if t.run is not None else repr(t.job)
            cancel = f"{t.job} --run {t.run}" if t.run is not None else t.job
            lines.append(
                f"Trial {t.number} still runs on {where}: follow it with `%ktrain attach "
                f"{t.job}`, cancel it with `%ktrain cancel {cancel}`."
            )
        if record.warm:
            warm = [j for j in sweep_jobs(record) if _alive(backend, j, None)]
            if warm:
                lines.append(
                    f"Its warm job(s) {', '.join(warm)} still hold their nodes: `%ktrain warm "
                    f"{warm[0]} --idle 0` ends one, `%ktrain delete {record.name}` removes "
                    "the sweep and all its jobs."
                )
    return "\n".join(lines), sweep


def delete_sweep(record: SweepRecord, backend: Backend) -> str:
    """``%ktrain delete SWEEP``: its trials' jobs and its record removed; one line. A sweep
    still running in a live process is refused (interrupt it there first)."""
    name = record.name
    if seen_state(record) == RUNNING:
        raise SpecError(
            f"Sweep {name!r} is running in process {record.pid} on "
            f"{record.host}: interrupt it there (Ctrl-C, or interrupt its kernel), then "
            f"`%ktrain delete {name}`."
        )
    deleted = []
    for job in sweep_jobs(record):
        try:
            backend.delete(job)
        except JobNotFound:
            continue
        deleted.append(job)
    remove_sweep(name)
    jobs = f"its job(s) {', '.join(deleted)}" if deleted else "no job of it was left"
    return f"Deleted sweep {name!r}: its record and {jobs}."


def list_row(record: SweepRecord) -> tuple[str, str, str]:
    """The sweep's row of ``%ktrain list``: name, backend, what it is."""
    ended = sum(r.state != TrialState.RUNNING for r in record.rows)
    best = next((r for r in record.rows if r.number == record.best), None)
    told = ""
    if best is not None and best.objective is not None:
        metric = record.objective.split(":")[0]
        told = f", best trial {best.number} {metric}={best.objective:.6g}"
    what = f"sweep {seen_state(record)} · {ended}/{record.trials} trial(s){told}"
    return record.name, record.backend, what


def compare_entries(record: SweepRecord) -> tuple[list[Entry], str | None]:
    """``%ktrain compare SWEEP``: one column per trial that ran on a job (its run of a warm
    job), its swept values and state as its params; and the metric: the objective's (None
    for ``result``, which has no curve)."""
    entries = [
        Entry(
            f"trial {r.number}",
            r.job,
            r.run,
            {**{k: str(v) for k, v in r.params.items()}, "state": str(r.state)},
        )
        for r in record.rows
        if r.job and (r.run is not None or not record.warm)
    ]
    metric = record.objective.split(":")[0]
    if len(entries) < 2:
        raise SpecError(
            f"Sweep {record.name!r} has {len(entries)} trial(s) that ran so far: compare "
            "needs two or more."
        )
    return entries, (None if metric == "result" else metric)
