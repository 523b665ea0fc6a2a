"""The one use case below every front end: run captured code as a job.

options -> capture -> spec -> checks -> replace -> dry run or schedule -> tracking -> follow
-> the words said. The magic (``%%ktrain``), ``ktrain.run``/``ktrain.submit`` and the console
script are thin adapters: each makes a :class:`~.options.RunOptions`, a
:class:`~.source.Source` and a :class:`~.front.Front`, and gets the :class:`Job` back.
"""

from __future__ import annotations

import dataclasses

from ..backends.base import Backend, Job
from ..backends.capabilities import job_shape
from ..backends.registry import get_backend
from ..backends.warm_shape import check_warm
from ..errors import JobNotFound, KtrainError
from ..spec.job import JobSpec
from ..words import describe
from . import track as tracking
from .follow import follow
from .front import Front
from .options import RunOptions
from .source import Source

__all__ = ["check", "run"]


def run(source: Source, options: RunOptions, front: Front) -> Job:
    """Run ``source`` as a job with ``options``, telling ``front`` what happens: the
    :class:`Job` (a dry run's, when nothing was started). Bad input raises one
    :class:`~jupyter_ktrain.errors.KtrainError` before anything is created; a followed job
    that fails raises :class:`~jupyter_ktrain.errors.JobFailed`."""
    program = source.capture(options.allow_secrets, options.by_reference)
    spec = options.spec(program.entry)
    check(spec)
    for warning in program.warnings:
        front.say(f"warning: {warning}")
    backend = get_backend(spec.backend)
    if options.replace and not options.dry_run:
        _replace(backend, spec.name, front)
    plan = backend.dryrun(spec, program)
    for note in plan.notes:
        front.say(f"note: {note}")
    if options.dry_run:
        front.say(plan.describe())
        return Job(spec.name, backend, plan, dry_run=True)
    if spec.pass_env:
        plan = dataclasses.replace(plan, environ=source.values_of(spec.pass_env))
    job = backend.schedule(plan)
    tracking.started(job, options.values, front.say)
    front.say(_started(job, backend))
    if options.detach:
        return job
    try:
        follow(job, front)
    finally:
        if job.run is not None and (line := _warm_line(backend, job.name)):
            front.say(line)
    return job


def check(spec: JobSpec) -> tuple[str, str] | None:
    """Every check of a job's spec before anything is made, the same for one run and for a
    sweep's trials: ``--warm`` fits its backend, MLflow is installed when the job is to be
    tracked. Where it is tracked (MLflow's URI and experiment), or None."""
    check_warm(spec)
    return tracking.check(spec)


def _started(job: Job, backend: Backend) -> str:
    assert job.plan is not None
    spec = job.plan.spec
    world = f"{spec.nodes} node(s) x {spec.nproc} process(es) on {backend.name}"
    if job.run is not None and job.run > 1:
        return f"Run {job.run} on the warm job {job.name!r}: {world}"
    if job.run is not None:
        return (
            f"Started the warm job {job.name!r}: {world}; run 1 starts once torch is imported. "
            f"Its nodes stay up for the next --warm cell until 15 min without a run "
            f"(`%ktrain warm {job.name} --idle 0` ends it now)."
        )
    return f"Started {spec.name!r}: {world}"


def _warm_line(backend: Backend, name: str) -> str:
    """After a run on a warm job: what it holds while it waits, and how to end it."""
    try:
        status = backend.status(name)
    except KtrainError:
        return ""
    if status.terminal:
        return f"The warm job {name!r} ended ({describe(status)})."
    if status.warm is None:
        return ""
    w, shape = status.warm, job_shape(backend, name)
    gpus = shape.nodes * shape.gpus_per_node if shape is not None else 0
    held = f"{gpus} GPU(s)" if gpus else "its nodes"
    limit = w.idle_limit_s / 60
    return (
        f"The warm job {name!r} keeps {held} for the next --warm cell; it ends after "
        f"{limit:g} min without a run (`%ktrain warm {name} --idle 0` ends it now)."
    )


def _replace(backend: Backend, name: str, front: Front) -> None:
    """``replace``: remove an earlier job of this name (stopping it if it runs)."""
    try:
        backend.delete(name)
    except JobNotFound:
        return
    front.say(f"Replaced the earlier job {name!r} (deleted it and its logs).")
