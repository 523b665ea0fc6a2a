"""Submitting from plain Python: ``ktrain.run`` and ``ktrain.submit``.

::

    import jupyter_ktrain as ktrain

    job = ktrain.run(train, args=(3,), kwargs={"lr": 2e-5}, nodes=2, procs_per_node=2)
    job.result  # train(3, lr=2e-05) as rank 0 returned it

The function's own arguments go in ``args``/``kwargs``; every other keyword is a ``%%ktrain``
flag (``-`` written ``_``), with the same checks and errors. The function is captured as the
cell captures a call: its helpers, globals, classes, imports and local modules travel, secrets
are refused. Works in a plain ``python script.py``, in papermill and in a notebook (there the
job shows in the widget monitor, as a cell's does). Same runner as the magic
(:mod:`jupyter_ktrain.runner`), so the same plan, the same MLflow run fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .backends.base import Job
from .runner.front import Front, TextFront, in_kernel, shell_words
from .runner.options import RunOptions
from .runner.run import run as run_job
from .runner.source import call_source

__all__ = ["run", "submit"]


def run(
    func: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Job:
    """Run ``func(*args, **kwargs)`` as a job and follow it until it ends: every rank's lines
    printed (in a notebook: the widget monitor), rank 0's return value in ``job.result``. A
    job that fails or is cancelled raises :class:`~jupyter_ktrain.errors.JobFailed`; bad
    options raise :class:`~jupyter_ktrain.errors.SpecError` before anything is created.
    ``options``: the ``%%ktrain`` flags as keywords (``nodes=2``, ``procs_per_node=2``,
    ``kind="PyTorchJob"``, ``warm=True``, ``checkpoints="pvc:/ckpt"``, ``mlflow=URI``,
    ``backend="kubernetes"``, ``dry_run=True``, ``detach=True``, ``replace=True``, ...)."""
    source = call_source(func, args, kwargs)
    return run_job(source, RunOptions.from_keywords(**options), _front())


def submit(
    func: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Job:
    """As :func:`run`, but return the :class:`Job` as soon as it is started (``job.wait()``,
    ``job.logs()``, ``job.result`` once it ended, ``ktrain attach NAME`` to follow it)."""
    return run(func, args, kwargs, **{**options, "detach": True})


def _front() -> Front:
    """The notebook's front in a Jupyter kernel (the widget monitor), else text on stdout
    with the hints worded for a shell (``ktrain attach NAME``)."""
    if in_kernel():
        from .notebook import NotebookFront  # the widgets load only in a kernel

        return NotebookFront(None)  # ktrain.run returns the job: no names are set
    return TextFront(reword=shell_words)
