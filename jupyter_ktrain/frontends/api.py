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

``ktrain.sweep(train, {"lr": "loguniform(1e-5,1e-3)"}, trials=8, parallel=2,
objective="loss:min", warm=True)`` runs many trials of ``train``, each swept name passed as
its keyword argument (:mod:`jupyter_ktrain.sweep`), and returns the :class:`Sweep`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import SpecError
from ..runner.front import Front, TextFront, in_kernel, shell_words
from ..runner.options import RunOptions
from ..runner.run import run as run_job
from ..runner.source import call_source
from ..runner.verbs import Job
from ..sweep.driver import check_call, run_sweep
from ..sweep.trials import Sweep
from ..sweep_spec.sweep_options import SweepOptions, space_texts

__all__ = ["run", "submit", "sweep"]


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


def sweep(
    func: Callable[..., Any],
    space: Mapping[str, str] | Sequence[str],
    *,
    objective: str,
    trials: int | None = None,
    parallel: int | None = None,
    search: str | None = None,
    prune_after: int | None = None,
    no_prune: bool = False,
    stop_on_failure: bool = False,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Sweep:
    """Run trials of ``func(*args, **kwargs, NAME=value...)``, each swept name of ``space``
    (``{"lr": "loguniform(1e-5,1e-3)", "batch": "choice(16,32)"}``) passed as a keyword
    argument, and return the :class:`~jupyter_ktrain.sweep.trials.Sweep` (``.trials``,
    ``.best``; ``.best.handle.result`` is the best trial's value). The sweep's arguments are
    the ``%%ktrain`` sweep flags (``objective="loss:min"``, ``trials=16``, ``parallel=2``,
    ``search="tpe"``, ``prune_after=5``, ``no_prune=True``, ``stop_on_failure=True``);
    ``options``, the job flags, as :func:`run` takes them (``warm=True``, ``nodes=2``, ...).
    Bad input raises one :class:`~jupyter_ktrain.errors.SpecError` before anything runs."""
    plan = SweepOptions.create(
        space_texts(space), objective, trials, parallel, search, prune_after, no_prune,
        stop_on_failure,
    )  # fmt: skip
    check_call(func, args, kwargs or {}, plan.names)
    run_options = RunOptions.from_keywords(**options)
    if run_options.detach or run_options.dry_run:
        raise SpecError("ktrain.sweep follows its trials: drop detach=/dry_run=.")
    source = call_source(func, args, kwargs, by_name=plan.names)
    return run_sweep(source, run_options, plan, _front())


def _front() -> Front:
    """The notebook's front in a Jupyter kernel (the widget monitor), else text on stdout
    with the hints worded for a shell (``ktrain attach NAME``)."""
    if in_kernel():
        from .notebook import NotebookFront  # the widgets load only in a kernel

        return NotebookFront(None)  # ktrain.run returns the job: no names are set
    return TextFront(reword=shell_words)
