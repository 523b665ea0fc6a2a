"""``%%ktrain`` (run a cell as a job) and ``%ktrain`` (list, attach, logs, cancel, delete).

Argument parsing and wiring only: capture, backends and views do the work. The line commands
are the table of :mod:`.commands`; here their replies are shown in the notebook.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from . import commands
from .backends.base import Backend, Job
from .backends.capabilities import job_shape
from .backends.registry import get_backend
from .backends.warm import check_warm
from .capture import capture
from .errors import JobFailed, JobNotFound, KtrainError, SpecError
from .monitor.live import model_for
from .monitor.model import MonitorModel
from .options import build_parser, env_names, parse_flags, spec_from_args, values_from_args
from .tracking import session as tracking
from .widgets.controls import kernel_busy

if TYPE_CHECKING:
    from .jobs import View

__all__ = [
    "KtrainMagics",
    "help_alone",
    "last_monitor",
    "run_job_cell",
    "run_line_command",
]

_last_monitor: tuple[MonitorModel, View] | None = None

_CELL_HELP = (
    "%%ktrain [FLAGS] on a cell's first line runs the cell as a job; "
    "`%%ktrain --help` alone in a cell lists the flags."
)


def _say(text: str) -> None:
    print(text, end="" if text.endswith("\n") else "\n", flush=True)


def _watch(job: Job, shell: Any) -> Job:
    """Follow ``job`` into the cell through one monitor model and its view; Ctrl-C detaches
    without stopping it. The cell blocks until the job ends (the widget's controls stay live:
    see :mod:`jupyter_ktrain.widgets.controls`), then sets the names rank 0 bound in
    ``shell``'s namespace, or raises :class:`JobFailed` (failed or cancelled) so that Run All
    and headless runs stop at this cell. The magics keep the kernel reported busy meanwhile
    (:func:`~jupyter_ktrain.widgets.controls.kernel_busy`)."""
    global _last_monitor
    model = model_for(job)
    view = _make_view(job, model)
    _last_monitor = (model, view)
    status = commands.follow_into(job, model, view, _say)
    if status is not None and status.state == "Succeeded" and shell is not None:
        outputs = {k: v for k, v in job.outputs.items() if k != "_"}
        shell.user_ns.update(outputs)
        if outputs:
            _say(f"Set from rank 0: {', '.join(sorted(outputs))}")
    return job


def _make_view(job: Job, model: MonitorModel) -> View:
    """The widget monitor in a kernel with widgets (``KTRAIN_MONITOR=text`` forces text),
    its controls routed so they work while the cell blocks; else the text view."""
    from .widgets.controls import control_subshell, route_to_subshell
    from .widgets.monitor import MonitorView, make_view, open_in_panel

    views: list[View] = []

    def cancel() -> None:
        shown = views[0] if views else None
        if isinstance(shown, MonitorView):
            shown.cancelling()
        try:
            job.cancel()
        except KtrainError as exc:
            if isinstance(shown, MonitorView):
                shown.cancel_failed()
            _say(f"ktrain: could not cancel {job.name!r}: {exc}")

    prefer = os.environ.get("KTRAIN_MONITOR", "auto").strip().lower() != "text"
    view = make_view(model, prefer_widgets=prefer, on_cancel=cancel, on_open_panel=open_in_panel)
    views.append(view)
    if isinstance(view, MonitorView):
        subshell = control_subshell()
        if subshell is not None:
            route_to_subshell(view.controls(), subshell)
    return view


def last_monitor() -> tuple[MonitorModel, View] | None:
    """The model and view of the most recent followed job in this kernel (for tests and
    debugging: ``model.metrics``, ``view.plot_history``)."""
    return _last_monitor


def join_continued(line: str, cell: str) -> tuple[str, str]:
    """Flags continued over several lines with a trailing backslash (IPython hands a cell
    magic only its first line): move the continuation lines from the body to the flags."""
    body = cell.split("\n")
    while line.rstrip().endswith("\\") and body:
        line = line.rstrip()[:-1] + " " + body.pop(0)
    return line, "\n".join(body)


def _kernel_values(names: tuple[str, ...], namespace: Any) -> dict[str, str]:
    """``--env NAME``: the kernel's environment variable, else the notebook's string global."""
    out = {}
    for name in names:
        value = os.environ.get(name, namespace.get(name))
        if not isinstance(value, str):
            raise SpecError(
                f"--env {name} passes the kernel's value, but the kernel has no environment "
                f"variable {name} and the notebook no string named {name}. Set it first, "
                f"e.g. `%set_env {name}=...` or `import os; os.environ[{name!r}] = ...`."
            )
        out[name] = value
    return out


def run_job_cell(line: str, cell: str, shell: Any) -> Job | None:
    """The whole ``%%ktrain`` cell: parse, capture, plan, then dry-run or run and follow."""
    line, cell = join_continued(line, cell)
    ns = parse_flags(line)
    if ns.help:
        _say(build_parser().format_help())
        return None
    if not cell.strip():
        raise SpecError(
            "The cell has no code under its %%ktrain line: put the call to run there, e.g. "
            "`result = train()` on the next line (`%%ktrain --help` lists the flags)."
        )
    history = shell.user_ns.get("In", []) if shell is not None else []
    hidden = getattr(shell, "user_ns_hidden", {}) if shell is not None else {}
    namespace = shell.user_ns if shell is not None else {}
    program = capture(
        cell,
        namespace,
        history,
        hidden,
        allow_secrets=ns.allow_secret or (),
        from_env=env_names(ns),
        cell_number=len(history) - 1 if len(history) > 1 else None,  # In[-1] is this cell
    )
    spec = spec_from_args(ns, program.entry)
    check_warm(spec)
    tracking.check(spec)  # MLflow installed, when the job is to be tracked
    for warning in program.warnings:
        _say(f"warning: {warning}")
    backend = get_backend(spec.backend)
    if ns.replace and not ns.dry_run:
        _replace(backend, spec.name)
    plan = backend.dryrun(spec, program)
    for note in plan.notes:
        _say(f"note: {note}")
    if ns.dry_run:
        _say(plan.describe())
        return Job(spec.name, backend, plan, dry_run=True)
    if spec.pass_env:
        plan = dataclasses.replace(plan, environ=_kernel_values(spec.pass_env, namespace))
    job = backend.schedule(plan)
    tracking.started(job, values_from_args(ns), _say)
    world = f"{spec.nodes} node(s) x {spec.nproc} process(es) on {backend.name}"
    if job.run is not None and job.run > 1:
        _say(f"Run {job.run} on the warm job {job.name!r}: {world}")
    elif job.run is not None:
        _say(
            f"Started the warm job {job.name!r}: {world}; run 1 starts once torch is imported. "
            f"Its nodes stay up for the next --warm cell until 15 min without a run "
            f"(`%ktrain warm {job.name} --idle 0` ends it now)."
        )
    else:
        _say(f"Started {spec.name!r}: {world}")
    if ns.detach:
        return job
    try:
        return _watch(job, shell)
    finally:
        if job.run is not None and (line := _warm_line(backend, job.name)):
            _say(line)


def _warm_line(backend: Backend, name: str) -> str:
    """After a run on a warm job: what it holds while it waits, and how to end it."""
    try:
        status = backend.status(name)
    except KtrainError:
        return ""
    if status.terminal:
        return f"The warm job {name!r} ended ({status.describe()})."
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


def _replace(backend: Backend, name: str) -> None:
    """``--replace``: remove an earlier job of this name (stopping it if it runs)."""
    try:
        backend.delete(name)
    except JobNotFound:
        return
    _say(f"Replaced the earlier job {name!r} (deleted it and its logs).")


_CELL_LINE = re.compile(r"%%ktrain(\s|$)")


def help_alone(lines: list[str]) -> list[str]:
    """An IPython input transformer: a cell that is only its ``%%ktrain`` line (``%%ktrain
    --help``) gets a blank body. IPython refuses a cell magic with an empty body before the
    magic runs ("the cell body is empty"); with a blank one, ours prints the help, or says
    that the cell has no code."""
    if not lines or not _CELL_LINE.match(lines[0]) or any(x.strip() for x in lines[1:]):
        return lines
    return [lines[0].rstrip("\n") + "\n", "\n"]


@magics_class
class KtrainMagics(Magics):
    """The magics. Each keeps the kernel reported busy while it runs (see
    :func:`~jupyter_ktrain.widgets.controls.kernel_busy`), from before any widget exists.

    A failed or cancelled job raises :class:`JobFailed` as it is: IPython shows its own
    rendering (``JobFailed: rank 1 raised ValueError: ...`` and rank 1's last lines, see
    :meth:`KtrainError.render`). Other errors are one ``UsageError`` line: no traceback."""

    @cell_magic
    def ktrain(self, line: str, cell: str) -> Job | None:
        """Run this cell as a distributed job. `%%ktrain --help` lists the flags."""
        with kernel_busy():
            try:
                return run_job_cell(line, cell, self.shell)
            except JobFailed:
                raise
            except KtrainError as exc:  # one message, no traceback; the cell counts as failed
                raise UsageError(f"ktrain: {exc}") from None

    @line_magic("ktrain")  # type: ignore[arg-type]
    def ktrain_line(self, line: str) -> Any:
        """Manage jobs: list, attach, logs, status, cancel, delete."""
        with kernel_busy():
            try:
                return run_line_command(shlex.split(line), self.shell)
            except JobFailed:
                raise
            except KtrainError as exc:
                raise UsageError(f"ktrain: {exc}") from None


def run_line_command(argv: list[str], shell: Any = None) -> Any:
    """``%ktrain COMMAND ...``: the command of :data:`~jupyter_ktrain.commands.COMMANDS`,
    its reply shown in the notebook (a compare's figure in a kernel, a followed job in the
    monitor, its outputs set in ``shell``); the followed :class:`Job`, else None."""
    if not argv or argv[0] in commands.HELP_WORDS:  # in a notebook, the cell magic too
        _say(commands.help_text("%ktrain ") + _CELL_HELP)
        return None
    reply = commands.run(argv)
    if reply.text:
        _say(reply.text)
    if reply.figure is not None and _in_kernel():
        from IPython.display import display

        display(reply.figure())  # type: ignore[no-untyped-call]
    if reply.error is not None:
        raise reply.error
    return _watch(reply.follow, shell) if reply.follow is not None else None


def _in_kernel() -> bool:
    """A Jupyter kernel (a figure shows there), not a terminal IPython."""
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None
