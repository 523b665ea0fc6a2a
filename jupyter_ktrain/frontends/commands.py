"""The line commands (``%ktrain list``, ``ktrain logs NAME``, ...): one table that the magic
(:mod:`.magics`) and the console script (:mod:`.cli`) both adapt.

A :class:`Command` names its arguments (:class:`Arg`) and a handler that takes plain values,
calls one verb of the job service (:mod:`.runner.verbs`; a name that may be a sweep's:
:mod:`.sweep.sweep_verbs`) and renders its result as a :class:`Reply`: the text to print, a
figure for a front end that can show one, a job to follow, an error to raise after the text.
:func:`parse` turns ``argv`` into a :class:`Call` (every bad input one :class:`SpecError`
saying what was wrong and the usage); :func:`help_text` lists the table. To add a line
command: write its handler, add its row to :data:`COMMANDS`; both front ends and both helps
then have it.

Messages name commands as typed in a notebook (``%ktrain X``); the console script rewords them
for a shell. Nothing here imports IPython.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ..errors import ClusterError, KtrainError, SpecError
from ..runner import verbs
from ..runner.verbs import PROFILE_STEPS, Job, Target
from ..spec.job import check_job_name
from ..spec.values import parse_duration
from ..sweep import sweep_verbs
from ..tracking import side_by_side as comparing
from ..words import cancelled_text, describe, status_text

__all__ = [
    "COMMANDS",
    "HELP_WORDS",
    "PROFILE_STEPS",
    "Arg",
    "Call",
    "Command",
    "Reply",
    "Target",
    "help_text",
    "parse",
    "parse_duration",
    "run",
]

HELP_WORDS = ("-h", "--help", "help")


@dataclass(frozen=True)
class Reply:
    """What a command answered. ``text`` is printed first (may be empty); ``figure`` builds a
    figure a front end with a display shows; ``follow`` is a job the front end follows into
    its monitor; ``error`` is raised after ``text`` (an answer that is incomplete, e.g. a
    list one backend could not give); ``value`` is what the magic returns (an attached
    sweep's :class:`~.sweep.trials.Sweep`)."""

    text: str = ""
    figure: Callable[[], Any] | None = None
    follow: Job | None = None
    error: KtrainError | None = None
    value: Any = None


@dataclass(frozen=True)
class Arg:
    """One argument: a positional (``name``) or an option (``--name``). ``convert`` turns the
    text into the handler's value, raising :class:`SpecError` with its own message; ``what``
    says what a missing value is ("a job name"); ``many``: a positional taking any number;
    ``switch``: an option that takes no value (True when given)."""

    name: str
    metavar: str
    what: str
    convert: Callable[[str], Any] = str
    required: bool = False
    many: bool = False
    switch: bool = False

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    @property
    def option(self) -> bool:
        return self.name.startswith("-")

    def usage(self) -> str:
        if self.many:
            return self.metavar  # written out in full: "A B [C ...]"
        if self.switch:
            return f"[{self.name}]"
        shown = f"{self.name} {self.metavar}" if self.option else self.metavar
        return shown if self.required else f"[{shown}]"


@dataclass(frozen=True)
class Command:
    """A line command: its arguments, one line of help or more, its handler. A handler of a
    command ``on_backend`` takes the :class:`Target` (``--backend``, ``--namespace``) first."""

    name: str
    args: tuple[Arg, ...]
    summary: str
    handler: Callable[..., Reply]
    on_backend: bool = True

    @property
    def usage(self) -> str:
        return " ".join([self.name, *(a.usage() for a in self.args)])


@dataclass(frozen=True)
class Call:
    """A parsed command line: the command and its handler's arguments, converted."""

    command: Command
    values: dict[str, Any]

    def run(self) -> Reply:
        return self.command.handler(**self.values)


# --- argument types: each refuses with a message naming the flag and an example -------------


def _duration(text: str) -> str:
    parse_duration(text)
    return text  # as typed: the reply repeats it


def _number(flag: str, what: str, example: str, signed: bool = False) -> Callable[[str], int]:
    def convert(text: str) -> int:
        if not re.fullmatch(r"-?\d+" if signed else r"\d+", text.strip()):
            raise SpecError(f"{flag} {text!r} is not {what}: use e.g. {flag} {example}.")
        return int(text)

    return convert


NAME = Arg("name", "NAME", "a job name", convert=check_job_name, required=True)
RUN = Arg("--run", "N", "a run number", convert=_number("--run", "a run number", "2"))
RANK = Arg("--rank", "R", "a rank", convert=_number("--rank", "a rank", "0", signed=True))
TARGET_ARGS = (
    Arg("--backend", "B", "local or kubernetes"),
    Arg("--namespace", "NS", "a Kubernetes namespace"),
)


# --- handlers: plain values in, one verb of the job service, its result rendered as a Reply ---


def list_jobs(target: Target) -> Reply:
    """Jobs of every listed backend and their sweeps (:func:`.sweep.sweep_verbs.list_jobs`); a
    backend that could not answer is one line of the error, after the others' jobs (the list
    is incomplete, so the command fails)."""
    listed = sweep_verbs.list_jobs(target)
    found = listed.jobs
    rows = [f"{s.name:32} {b:10} {describe(s)}".rstrip() for b, s in found.jobs]
    rows += [f"{n:32} {b:10} {what}" for n, b, what in listed.sweeps]
    text = ""
    if rows:
        text = f"{'NAME':32} {'BACKEND':10} STATE\n" + "\n".join(rows)
    elif not found.problems:
        text = f"No jobs yet on {' or '.join(found.backends)}."
    problems = [f"{name}: {error}" for name, error in found.problems]
    return Reply(text, error=ClusterError("\n".join(problems)) if problems else None)


def attach(target: Target, name: str) -> Reply:
    """Follow the job again; a sweep's name: the sweep as it stands (its :class:`Sweep`)."""
    found = sweep_verbs.attach(target, name)
    if isinstance(found, sweep_verbs.SweepSeen):
        return Reply(found.text, value=found.sweep)
    return Reply(follow=found)


def status(target: Target, name: str) -> Reply:
    backend = target.open()
    now = verbs.status(backend, name)
    text = status_text(now, backend.name)
    hang = verbs.kept_hang(backend, name, now)  # said by the cell or the job's watch
    if hang is not None:
        text += "\nwarning: " + str(hang.get("text", "")).replace("\n", "\n  ")
    return Reply(text)


def logs(
    target: Target, name: str, rank: int | None, grep: str | None, run: int | None, whole: bool
) -> Reply:
    """The stored lines, or a line saying why none (:func:`.runner.verbs.logs`)."""
    return Reply(verbs.logs(target.open(), name, rank, grep, run, whole))


def cancel(target: Target, name: str, run: int | None) -> Reply:
    """Stop the job, or one run of a warm job (its nodes stay)."""
    done = verbs.cancel(target.open(), name, run)
    if done.run is not None:
        return Reply(f"Run {done.run} of {name!r}: {done.run_state}; its nodes stay warm.")
    if not done.done and done.before is not None:
        return Reply(f"{name!r} already ended ({done.before.state}); nothing to cancel.")
    return Reply(cancelled_text(name, done.after))


def warm(target: Target, name: str, idle: str) -> Reply:
    """Change a warm job's idle limit; 0 ends it now."""
    done = verbs.warm(target.open(), name, idle)
    if done.seconds <= 0:
        return Reply(f"Ended the warm job {name!r} ({describe(done.status)}).")
    return Reply(f"The warm job {name!r} now ends after {idle} without a run.")


def delete(target: Target, name: str, history: bool = False) -> Reply:
    """What was removed where. A cluster job's objects are deleted and its history kept
    (``--history`` removes it too); a local job's folder is its history, so all of it goes.
    A sweep's name: its trials' jobs and its record."""
    done = sweep_verbs.delete(target, name, history)
    if isinstance(done, str):
        return Reply(done)
    namespace = done.namespace
    if done.already:
        said = f"{name!r} has no objects left in namespace {namespace!r} (deleted before)."
    elif namespace is None:
        said = f"Deleted {name!r}."
    else:
        said = (
            f"Deleted {name!r} from namespace {namespace!r}: the job and the pods, ConfigMap "
            "and Service it owned."
        )
    if done.history is None:
        return Reply(said + done.forgot)
    return Reply(
        said + f" Its history (state, logs, params) is kept in {done.history}: "
        f"`%ktrain status/logs/compare` still read it; `%ktrain delete {name} --history` "
        "removes it."
    )


def check_compare_name(name: str) -> str:
    """A job's name, or ``NAME:N`` for run N of a warm job
    (:func:`.tracking.side_by_side.entry`)."""
    comparing.entry(name)
    return name


def compare(target: Target, names: Sequence[str], metric: str | None) -> Reply:
    """The table always; the plot for a front end that shows figures."""
    c = sweep_verbs.compare(target, names, metric)
    return Reply(comparing.text(c), figure=lambda: comparing.figure(c))


def stacks(target: Target, name: str, rank: int | None) -> Reply:
    return Reply(verbs.stacks(target.open(), name, rank))


def profile(target: Target, name: str, steps: int | None, rank: int | None) -> Reply:
    return Reply(verbs.profile(target.open(), name, steps, rank))


def _steps(text: str) -> int:
    if not re.fullmatch(r"-?\d+", text.strip()) or int(text) < 1:
        raise SpecError(
            f"--steps {text!r} is not a number of steps (1 or more): use e.g. --steps 3."
        )
    return int(text)


def config(settings: Sequence[str]) -> Reply:
    from ..config import load_config, set_config

    cfg = set_config(list(settings)) if settings else load_config()
    return Reply(cfg.describe())


COMMANDS: tuple[Command, ...] = (
    Command(
        "list",
        (),
        "jobs of every backend (local, and the configured cluster;\n"
        "with --namespace NS, the cluster's jobs there)",
        list_jobs,
    ),
    Command(
        "attach",
        (NAME,),
        "follow a running job again (e.g. after a kernel restart);\n"
        "a sweep's name: the sweep as it stands",
        attach,
    ),
    Command(
        "logs",
        (
            NAME,
            RANK,
            Arg("--grep", "TEXT", "the text to look for"),
            RUN,
            Arg("--whole", "", "", switch=True),
        ),
        "the stored lines: of one rank, with TEXT, of run N of a\nwarm job; --whole: unfolded",
        logs,
    ),
    Command("status", (NAME,), "state and why, times, exit codes, replicas", status),
    Command(
        "stacks",
        (NAME, RANK),
        "where each running rank is now: its Python stack, every\n"
        "thread (--rank R: that rank only; a warm job: its run)",
        stacks,
    ),
    Command(
        "profile",
        (
            NAME,
            Arg("--steps", "N", "a number of steps (default 3)", convert=_steps),
            RANK,
        ),
        "torch.profiler on every running rank for its next N\n"
        "steps (3): top operators, compute/communication/waiting;\n"
        "the Chrome traces kept in the job store (--rank R: one)",
        profile,
    ),
    Command(
        "cancel",
        (NAME, RUN),
        "stop the job (on Kubernetes: delete it and its pods);\n"
        "--run N stops one run of a warm job (its nodes stay)",
        cancel,
    ),
    Command(
        "warm",
        (
            NAME,
            Arg(
                "--idle",
                "DURATION",
                "--idle DURATION (e.g. 15m; 0 ends it now)",
                convert=_duration,
                required=True,
            ),
        ),
        "a warm job's idle limit (s, m, h); --idle 0 ends it now",
        warm,
    ),
    Command(
        "delete",
        (NAME, Arg("--history", "", "", switch=True)),
        "cancel, then remove everything it left (files, objects);\n"
        "a cluster job's history (state, logs, params) is kept\n"
        "for logs/status/compare unless --history is given;\n"
        "a sweep's name: its trials' jobs and its record",
        delete,
    ),
    Command(
        "compare",
        (
            Arg(
                "names",
                "A B [C ...]",
                "two jobs or more (NAME:N: run N of a warm job)",
                convert=check_compare_name,
                many=True,
            ),
            Arg("--metric", "NAME", "a metric name, e.g. loss"),
        ),
        "one metric of several jobs overlaid, with the flags and\n"
        "constants that differ between them; one sweep's name:\n"
        "its trials, with their swept values",
        compare,
    ),
    Command(
        "config",
        (Arg("settings", "[key=value ...]", "settings", many=True),),
        "show or set defaults (backend, namespace, kubeconfig,\n"
        "context, registry, base_image, insecure_registries,\n"
        "offline_requirements, kueue_queue, topology, mlflow, ...);\n"
        "never secrets",
        config,
        on_backend=False,
    ),
)

_BY_NAME = {c.name: c for c in COMMANDS}
_COLUMN = 36  # where the help's summaries start


def _row(usage: str, summary: str) -> list[str]:
    """One help entry: the usage, its summary from column 36 (on the next line if it is long)."""
    lines = summary.splitlines() or [""]
    if len(usage) < _COLUMN:
        return [f"{usage:{_COLUMN}}{lines[0]}".rstrip()] + [" " * _COLUMN + s for s in lines[1:]]
    return [usage] + [" " * _COLUMN + s for s in lines]


def help_text(prefix: str = "%ktrain ", extra: Sequence[tuple[str, str]] = ()) -> str:
    """Every command of the table, each usage after ``prefix`` (``"%ktrain "`` or
    ``"ktrain "``), with ``extra`` rows (usage, summary) first, and the common options."""
    rows = [line for u, s in extra for line in _row(prefix + u, s)]
    rows += [line for c in COMMANDS for line in _row(prefix + c.usage, c.summary)]
    others = [c.name for c in COMMANDS if not c.on_backend]
    return "\n".join(rows) + (
        f"\nEvery command but {', '.join(others)} takes --backend local|kubernetes (default: the "
        "configured one), and\non Kubernetes --namespace NS (default: the configured one, else "
        "the kubeconfig's or the pod's).\n"
    )


def _command_help(command: Command) -> str:
    text = "\n".join(_row("%ktrain " + command.usage, command.summary)) + "\n"
    if command.on_backend:
        text += "Also --backend local|kubernetes, and on Kubernetes --namespace NS.\n"
    return text


class _BadUsage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print and exit
        raise _BadUsage(message)


def _refuse(command: Command, message: str) -> SpecError:
    return SpecError(f"%ktrain {command.name}: {message}. Usage: `%ktrain {command.usage}`.")


def parse(argv: Sequence[str]) -> Call | Reply:
    """``argv`` (the command's name first) as a :class:`Call` of its handler; a :class:`Reply`
    with the command's help for ``-h``/``--help``. Bad input: :class:`SpecError` saying what
    was wrong and how the command is used."""
    if not argv:
        raise SpecError("No %ktrain command given: `%ktrain help` lists them.")
    command = _BY_NAME.get(argv[0])
    if command is None:
        raise SpecError(
            f"Unknown %ktrain command {argv[0]!r}: the commands are "
            f"{', '.join(_BY_NAME)} (`%ktrain help` says what each does)."
        )
    rest = list(argv[1:])
    if any(a in HELP_WORDS[:2] for a in rest):
        return Reply(_command_help(command))
    args = command.args + (TARGET_ARGS if command.on_backend else ())
    parser = _Parser(
        prog=f"%ktrain {command.name}", add_help=False, allow_abbrev=False, exit_on_error=False
    )
    for arg in args:
        if arg.switch:
            parser.add_argument(arg.name, dest=arg.dest, action="store_true")
        elif arg.option:
            parser.add_argument(arg.name, dest=arg.dest, metavar=arg.metavar)
        else:
            parser.add_argument(arg.dest, nargs="*" if arg.many else "?", metavar=arg.metavar)
    try:
        ns = parser.parse_intermixed_args(rest)  # options anywhere, as typed
    except argparse.ArgumentError as exc:
        if exc.message == "expected one argument" and exc.argument_name:
            what = next(a.what for a in args if a.name == exc.argument_name)
            raise SpecError(f"{exc.argument_name} needs a value: {what}.") from None
        raise _refuse(command, f"{exc.argument_name}: {exc.message}") from None
    except _BadUsage as exc:
        raise _refuse(command, str(exc)) from None
    values: dict[str, Any] = {}
    for arg in args:
        value = getattr(ns, arg.dest)
        if value is None and arg.required:
            raise SpecError(f"%ktrain {command.name} needs {arg.what}: `%ktrain {command.usage}`.")
        if arg.many:
            value = [arg.convert(v) for v in value]
        elif value is not None and not arg.switch:
            value = arg.convert(value)
        values[arg.dest] = value
    if command.on_backend:
        values["target"] = Target(values.pop("backend"), values.pop("namespace"))
    return Call(command, values)


def run(argv: Sequence[str]) -> Reply:
    """Parse ``argv`` and run the command: its :class:`Reply`."""
    call = parse(argv)
    return call if isinstance(call, Reply) else call.run()
