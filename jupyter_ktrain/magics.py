"""``%%ktrain`` (run a cell as a job) and ``%ktrain`` (list, attach, logs, cancel, delete).

Argument parsing and wiring only: capture, backends and views do the work.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from .backends import get_backend, listed_backends
from .backends.base import CANCELLED, FAILED, Backend, Job, JobStatus
from .backends.warm import check_warm
from .capture import capture
from .errors import ClusterError, JobFailed, JobNotFound, KtrainError, SpecError
from .monitor.cell_error import job_error
from .monitor.follow import follow
from .monitor.live import ModelSink, model_for
from .monitor.model import MonitorModel
from .monitor.text import status_text
from .options import build_parser, env_names, parse_flags, spec_from_args, values_from_args
from .spec import check_job_name
from .tracking import session as tracking
from .tracking.store import job_dir
from .widgets.controls import kernel_busy

if TYPE_CHECKING:
    from .widgets.monitor import View

__all__ = [
    "KtrainMagics",
    "help_alone",
    "last_monitor",
    "run_job_cell",
    "run_line_command",
    "set_wording",
]

_last_monitor: tuple[MonitorModel, View] | None = None

_LINE_HELP = """\
%ktrain list                        jobs of the backend (local, or the namespace's ktrain jobs)
%ktrain attach NAME                 follow a running job again (e.g. after a kernel restart)
%ktrain logs NAME [--rank R] [--grep TEXT] [--run N]
%ktrain status NAME
%ktrain cancel NAME [--run N]       stop the job (on Kubernetes: delete it and its pods);
                                    --run N stops one run of a warm job (its nodes stay)
%ktrain warm NAME --idle 15m        a warm job's idle limit (s, m, h); --idle 0 ends it now
%ktrain delete NAME [--history]     cancel, then remove everything it left (files, objects);
                                    a cluster job's history (state, logs, params) is kept
                                    for logs/status/compare unless --history is given
%ktrain compare A B [C ...] [--metric NAME]
                                    one metric of several jobs overlaid, with the flags and
                                    constants that differ between them
%ktrain config [key=value ...]      show or set defaults (backend, namespace, kubeconfig,
                                    context, registry, base_image, insecure_registries,
                                    offline_requirements); never secrets
Every command but config takes --backend local|kubernetes (default: the configured one), and
on Kubernetes --namespace NS (default: the configured one, else the kubeconfig's or the pod's).
"""


_HELP_WORDS = ("-h", "--help", "help")

_wording: Callable[[str], str] = str  # the console script rewrites `%ktrain X` for a shell


def set_wording(rewrite: Callable[[str], str]) -> None:
    """How messages name commands: as typed in a notebook (default) or in a shell."""
    global _wording
    _wording = rewrite


def _say(text: str) -> None:
    text = _wording(text)
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
    view.show()
    sink = tracking.sink_for(job, ModelSink(model, view), _say)  # MLflow, when configured
    try:
        status = follow(job, sink)
    except KeyboardInterrupt:
        tracking.detached(sink)
        view.close()
        _say(
            f"Detached from {job.name!r}; it keeps running.\n"
            f"  re-attach: %ktrain attach {job.name}\n  cancel:    %ktrain cancel {job.name}"
        )
        return job
    view.close()
    tracking.finished(sink, job, status, _say)
    if status.state in (FAILED, CANCELLED):
        raise job_error(job, status)
    if status.state == "Succeeded" and shell is not None:
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
    w, shape = status.warm, backend.shape(name)
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
                return self._line(shlex.split(line))
            except JobFailed:
                raise
            except KtrainError as exc:
                raise UsageError(f"ktrain: {exc}") from None

    def _line(self, argv: list[str]) -> Any:
        if not argv or argv[0] in _HELP_WORDS:  # in a notebook, the cell magic too
            _say(_LINE_HELP + "%%ktrain [FLAGS] on a cell's first line runs the cell as a job; "
                 "`%%ktrain --help` alone in a cell lists the flags.")  # fmt: skip
            return None
        return run_line_command(argv, self.shell)


def run_line_command(argv: list[str], shell: Any = None) -> Any:
    """``%ktrain COMMAND ...`` and ``ktrain COMMAND ...`` (the console script) alike."""
    if not argv or argv[0] in _HELP_WORDS:
        _say(_LINE_HELP)
        return None
    command, args = argv[0], argv[1:]
    if command == "config":
        from .config import load_config, set_config

        cfg = set_config(args) if args else load_config()
        _say(cfg.describe())
        return None
    backend_name, args = _pop_option(args, "--backend", "local or kubernetes")
    namespace, args = _pop_option(args, "--namespace", "a Kubernetes namespace")
    if command == "list":
        _list(backend_name, namespace)
        return None
    backend = _backend(backend_name, namespace)
    if command == "compare":
        return _compare(backend, args)
    if command not in ("attach", "status", "logs", "cancel", "delete", "warm"):
        raise SpecError(f"Unknown %ktrain command {command!r}.\n{_LINE_HELP}")
    if not args:
        raise SpecError(f"%ktrain {command} needs a job name, e.g. %ktrain {command} NAME.")
    name = check_job_name(args[0])
    if command == "attach":
        return _watch(backend.attach(name), shell)
    if command == "status":
        _say(status_text(backend.status(name), backend.name))
        return None
    if command == "logs":
        return _logs(backend.attach(name), args[1:])
    if command == "warm":
        return _warm(backend, name, args[1:])
    if command == "cancel" and args[1:]:
        return _cancel_run(backend, name, args[1:])
    if command == "cancel":
        status = backend.status(name)
        if status.terminal:
            _say(f"{name!r} already ended ({status.state}); nothing to cancel.")
            return None
        backend.cancel(name)
        try:
            after: JobStatus | None = backend.status(name)
        except JobNotFound:
            after = None
        _say(_cancelled(name, after))
        return None
    _say(_delete(backend, name, args[1:]))
    return None


def _delete(backend: Backend, name: str, argv: list[str]) -> str:
    """``%ktrain delete NAME [--history]``: what was removed where. A cluster job's objects
    are deleted and its history kept (``--history`` removes it too); a local job's folder is
    its history, so all of it goes."""
    if [a for a in argv if a != "--history"]:
        raise SpecError(f"%ktrain delete takes a name and --history only, not {argv}.")
    status = backend.status(name)  # JobNotFound: neither objects nor history
    namespace = getattr(backend, "namespace", None) if backend.name == "kubernetes" else None
    if status.from_history:
        said = f"{name!r} has no objects left in namespace {namespace!r} (deleted before)."
    else:
        backend.delete(name)
        said = (
            f"Deleted {name!r}."
            if namespace is None
            else (
                f"Deleted {name!r} from namespace {namespace!r}: the job and the pods, ConfigMap "
                "and Service it owned."
            )
        )
    if namespace is None or "--history" in argv:
        return said + tracking.forget(backend.name, name)
    return said + (
        f" Its history (state, logs, params) is kept in {job_dir(backend.name, name)}: "
        f"`%ktrain status/logs/compare` still read it; `%ktrain delete {name} --history` "
        "removes it."
    )


def _compare(backend: Backend, argv: list[str]) -> Any:
    """``%ktrain compare A B C [--metric NAME]``: the table always, the plot where it shows."""
    from .tracking import compare

    metric = None
    if "--metric" in argv:
        i = argv.index("--metric")
        if i + 1 >= len(argv):
            raise SpecError("--metric needs a name, e.g. %ktrain compare A B --metric loss.")
        metric, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    names = [check_job_name(n) for n in argv]
    for name in names:
        backend.status(name)  # a job that is not there: one error naming it
    c = compare.comparison(backend, names, metric)
    _say(compare.text(c))
    if _in_kernel():
        from IPython.display import display

        display(compare.figure(c))  # type: ignore[no-untyped-call]
    return None


def _in_kernel() -> bool:
    """A Jupyter kernel (the plot shows there), not a terminal or the console script."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def parse_duration(text: str) -> float:
    """``15m`` -> 900.0; ``90s``, ``1h``, ``0``; a bare number is minutes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise SpecError(f"--idle {text!r} is not a duration: use e.g. 90s, 15m, 2h, or 0 (end).")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "": 60}[m.group(2)]


def _warm(backend: Backend, name: str, argv: list[str]) -> None:
    """``%ktrain warm NAME --idle 15m``: change a warm job's idle limit; 0 ends it now."""
    if len(argv) != 2 or argv[0] != "--idle":
        raise SpecError("usage: %ktrain warm NAME --idle DURATION (e.g. 15m; 0 ends it now)")
    seconds = parse_duration(argv[1])
    status = backend.set_idle_limit(name, seconds)
    if seconds <= 0:
        _say(f"Ended the warm job {name!r} ({status.describe()}).")
    else:
        _say(f"The warm job {name!r} now ends after {argv[1]} without a run.")


def _cancel_run(backend: Backend, name: str, argv: list[str]) -> None:
    if len(argv) != 2 or argv[0] != "--run" or not argv[1].isdigit():
        raise SpecError("usage: %ktrain cancel NAME [--run N]")
    run = int(argv[1])
    backend.cancel_run(name, run)
    _say(f"Run {run} of {name!r}: {backend.run_status(name, run).state}; its nodes stay warm.")


def _cancelled(name: str, status: JobStatus | None) -> str:
    """What a cancel did, as it happened: ``Cancelled 'x'.``, with what the backend found
    (``its supervisor was gone; the cancel stopped ...``), or how the job ended meanwhile.
    ``status`` is None when the cancel removed the job (Kubernetes deletes it)."""
    if status is None or not status.terminal:
        return f"Cancelled {name!r}."
    if status.state == CANCELLED:
        return (
            f"Cancelled {name!r}: {status.message}." if status.message else f"Cancelled {name!r}."
        )
    why = f"{status.reason}: {status.message}" if status.message else status.reason
    return (
        f"{name!r} ended {status.state} ({why}) before the cancel took effect; nothing of it runs."
    )


def _list(backend_name: str | None, namespace: str | None = None) -> None:
    """Jobs of every listed backend (local always, the configured one too; with
    ``namespace``, the cluster's there only); a backend that cannot answer is one line (a
    ClusterError: the cell and ``ktrain list`` fail), after the others' jobs are listed."""
    names = [backend_name] if backend_name else listed_backends()
    if namespace is not None:
        names = [backend_name or "kubernetes"]
    rows: list[str] = []
    problems: list[str] = []
    for name in names:
        try:
            statuses = _backend(name, namespace).list_jobs()
        except KtrainError as exc:
            problems.append(f"{name}: {exc}")
            continue
        rows += [f"{s.name:32} {name:10} {s.describe()}".rstrip() for s in statuses]
    if rows:
        _say(f"{'NAME':32} {'BACKEND':10} STATE\n" + "\n".join(rows))
    elif not problems:
        _say(f"No jobs yet on {' or '.join(names)}.")
    if problems:  # what could be listed is shown; the list is incomplete, so it fails
        raise ClusterError("\n".join(problems))


def _backend(name: str | None, namespace: str | None) -> Backend:
    """Backend ``name`` (default: the configured one); with ``namespace``, the Kubernetes
    backend working in that namespace (``--namespace``), whatever the config names."""
    if namespace is None:
        return get_backend(name)
    from .backends import default_backend_name
    from .config import load_config

    if (name or default_backend_name()) != "kubernetes":
        raise SpecError(
            "--namespace is for the kubernetes backend: add --backend kubernetes, or set "
            "`%ktrain config backend=kubernetes`."
        )
    return get_backend("kubernetes", config=dataclasses.replace(load_config(), namespace=namespace))


def _pop_option(args: list[str], flag: str, what: str) -> tuple[str | None, list[str]]:
    """``FLAG VALUE`` / ``FLAG=VALUE`` anywhere in ``args``; the rest unchanged."""
    out, name, i = [], None, 0
    while i < len(args):
        arg = args[i]
        if arg == flag:
            if i + 1 >= len(args):
                raise SpecError(f"{flag} needs a value: {what}.")
            name, i = args[i + 1], i + 2
            continue
        if arg.startswith(f"{flag}="):
            name = arg.split("=", 1)[1]
        else:
            out.append(arg)
        i += 1
    return name, out


def _logs(job: Job, argv: list[str]) -> None:
    """Print the stored lines, or one line saying why there are none."""
    import argparse

    p = argparse.ArgumentParser(prog="%ktrain logs", add_help=False, exit_on_error=False)
    p.add_argument("--rank", type=int)
    p.add_argument("--grep")
    p.add_argument("--run", type=int)
    try:
        ns = p.parse_args(argv)
    except (argparse.ArgumentError, SystemExit):
        raise SpecError("usage: %ktrain logs NAME [--rank R] [--grep TEXT] [--run N]") from None
    text = job.logs(rank=ns.rank, grep=ns.grep, run=ns.run)
    if text:
        _say(text)
        return None
    shape = job.shape
    world = shape.nodes * shape.procs_per_node if shape is not None else None
    if ns.rank is not None and world is not None and not 0 <= ns.rank < world:
        raise SpecError(
            f"{job.name!r} has ranks 0-{world - 1}; there is no rank {ns.rank}. "
            f"Pass --rank 0 to {world - 1}, or leave --rank out for every rank."
        )
    who = f"rank {ns.rank}" if ns.rank is not None else job.name
    if ns.grep is not None:
        _say(f"No line of {who} contains {ns.grep!r} (so far).")
    else:
        _say(f"No output from {who} yet ({job.state}).")
    return None
