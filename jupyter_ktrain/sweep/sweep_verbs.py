"""The job service's verbs where a sweep's name may stand for a job's: ``%ktrain list`` (the
sweeps' rows too), ``attach``, ``delete`` and ``compare`` of a sweep. A name that is a sweep's
(its record in the job store, and no job of that name) is the sweep's; any other name goes to
the service's verb (:mod:`jupyter_ktrain.runner.verbs`) as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..backends.base import Backend, Job
from ..errors import JobNotFound
from ..runner import verbs
from ..runner.compare import compare_entries
from ..runner.verbs import Deleted, JobList, Target
from ..spec.job import check_job_name
from ..store.sweeps import SweepRecord, list_sweeps, read_sweep
from ..tracking.side_by_side import Comparison, Entry
from . import seen
from .trials import Sweep

__all__ = ["Listed", "SweepSeen", "attach", "compare", "delete", "list_jobs", "record", "records"]


@dataclass(frozen=True)
class Listed:
    """The jobs of the listed backends (:class:`~jupyter_ktrain.runner.verbs.JobList`) and
    the sweeps of those backends, each ``(name, backend, what it is)``."""

    jobs: JobList
    sweeps: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class SweepSeen:
    """An attached sweep: its table as it stands (``text``) and its :class:`Sweep`."""

    text: str
    sweep: Sweep


def _sweep(target: Target, name: str) -> tuple[SweepRecord, Backend] | None:
    """Sweep ``name``'s record and its backend, when there is one and no job of that name."""
    record = read_sweep(name)
    if record is None:
        return None
    on = record.backend or None
    if target.backend not in (None, on) or (target.namespace is not None and on != "kubernetes"):
        return None  # another backend's job is asked for
    backend = Target(on, target.namespace).open()
    try:
        backend.status(name)
    except JobNotFound:
        return record, backend
    return None


def list_jobs(target: Target) -> Listed:
    """The service's list, and (without a namespace) the sweeps of the backends listed."""
    jobs = verbs.list_jobs(target.backends())
    if target.namespace is not None:
        return Listed(jobs)
    rows = [seen.list_row(r) for r in list_sweeps() if r.backend in jobs.backends]
    return Listed(jobs, tuple(rows))


def attach(target: Target, name: str) -> Job | SweepSeen:
    """Follow the job again; a sweep's name: the sweep as it stands."""
    found = _sweep(target, name)
    if found is not None:
        return SweepSeen(*seen.attach_text(*found))
    return verbs.attach(target.open(), name)


def delete(target: Target, name: str, history: bool = False) -> Deleted | str:
    """The service's delete; a sweep's name: its trials' jobs and its record (what was
    removed, one line)."""
    found = _sweep(target, name)
    if found is not None:
        return seen.delete_sweep(*found)
    return verbs.delete(target.open(), name, history)


def compare(target: Target, names: Sequence[str], metric: str | None) -> Comparison:
    """The service's compare; one sweep's name: its trials (each its job, or its run of a
    warm job), with their swept values, on the sweep's objective unless ``metric``."""
    found = _sweep(target, names[0]) if len(names) == 1 else None
    if found is None:
        return verbs.compare(target.open(), names, metric)
    record, backend = found
    entries, objective = seen.compare_entries(record)
    return compare_entries(backend, _existing(backend, entries), metric or objective)


def _existing(backend: Backend, entries: list[Entry]) -> list[Entry]:
    """The entries whose job is there (a trial that failed to start made none)."""
    there: list[Entry] = []
    for entry in entries:
        try:
            backend.status(entry.job)
        except JobNotFound:
            continue
        there.append(entry)
    return there


def records() -> list[SweepRecord]:
    """Every sweep's record of the job store, newest first."""
    return list_sweeps()


def record(name: str) -> SweepRecord:
    """Sweep ``name``'s record; JobNotFound when the store has none of that name."""
    check_job_name(name, "sweep", "The panel's Sweeps list")
    found = read_sweep(name)
    if found is None:
        raise JobNotFound(
            f"No sweep named {name!r} in the job store: the panel's Sweeps list shows the "
            f"sweeps that exist."
        )
    return found
