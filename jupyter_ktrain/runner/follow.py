"""Following a job to its end, the same for every front end: the view, MLflow tracking when
the job's record says so, Ctrl-C as a detach, the failure raised, the names handed back.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ..backends.capabilities import StacksShown
from ..jobs import CANCELLED, FAILED, SUCCEEDED, JobStatus
from ..monitor.cell_error import job_error
from ..monitor.follow_loop import follow as follow_loop
from ..monitor.live import ModelSink, model_for
from ..store.records import keep_hang
from . import track as tracking

if TYPE_CHECKING:
    from ..backends.base import Job
    from .front import Front

__all__ = ["follow"]


def follow(job: Job, front: Front) -> JobStatus | None:
    """Show ``job`` in the front's view until it ends; the final status, or None when Ctrl-C
    detached (the job keeps running; the front is told how to re-attach). A job that
    succeeded hands the names rank 0 bound to ``front.bind``; a failed or cancelled one
    raises its :class:`~jupyter_ktrain.errors.JobFailed` after the view is closed."""
    model = model_for(job)
    view = front.view(job, model)
    view.show()
    # a rank named hung gets every rank's stack taken once; the side panel shows what the cell
    # says of it (the store's hang.json), or what the job's own watch says where it has one
    backend = job.backend
    stacks = partial(backend.stacks, job.name) if isinstance(backend, StacksShown) else None
    watched = backend.hangs_watched and job.run is None  # a warm job's runs: the cell's
    keep = None if watched else partial(keep_hang, backend.name, job.name)
    models = ModelSink(model, view, stacks=stacks, keep_hang=keep)
    sink = tracking.sink_for(job, models, front.say)  # MLflow, when configured
    try:
        status = follow_loop(job, sink)
    except KeyboardInterrupt:
        tracking.detached(sink)
        view.close()
        front.say(
            f"Detached from {job.name!r}; it keeps running.\n"
            f"  re-attach: %ktrain attach {job.name}\n  cancel:    %ktrain cancel {job.name}"
        )
        return None
    view.close()
    if keep is not None:
        keep(None)  # an ended job hangs no more
    tracking.finished(sink, job, status, front.say)
    if status.state in (FAILED, CANCELLED):
        raise job_error(job, status)
    if status.state == SUCCEEDED:
        front.bind({k: v for k, v in job.outputs.items() if k != "_"})
    return status
