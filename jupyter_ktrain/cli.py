"""The ``ktrain`` console script: ``ktrain render`` (manifests for git), and the line commands
of :mod:`.commands` (``ktrain list``, ``ktrain logs NAME``, ``ktrain status NAME``, ...) with
their replies printed as text, worded for a shell. No IPython here."""

from __future__ import annotations

import io
import sys
from typing import IO, cast

from . import commands
from .backends.base import Job
from .errors import KtrainError, SpecError

__all__ = ["for_shell", "main"]

_RENDER = ("render [flags | -f spec.yaml]", "print the Kubernetes objects of a job (YAML)")
_EXIT = "Exit status: 0 done, 1 the command failed (the message says why), 2 bad usage.\n"


def usage() -> str:
    """``ktrain --help``: ``render`` and every command of the table, worded for a shell."""
    text = commands.help_text("ktrain ", extra=[_RENDER])
    return for_shell(f"usage: ktrain COMMAND [ARGS]\n\n{text}\n{_EXIT}")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in commands.HELP_WORDS:
        print(usage())
        return 0 if args else 2
    try:
        if args[0] == "render":
            from .cli_render import render_main

            return render_main(args[1:])
        reply = commands.run(args)
        if reply.text:
            _say(reply.text)
        if reply.error is not None:
            raise reply.error
        if reply.follow is not None:
            _say(repr(_follow(reply.follow)))
        return 0
    except KtrainError as exc:
        print(for_shell(f"ktrain: {exc}"), file=sys.stderr)
        return 2 if isinstance(exc, SpecError) else 1  # bad usage, or the command failed


def _say(text: str) -> None:
    text = for_shell(text)
    print(text, end="" if text.endswith("\n") else "\n", flush=True)


def _follow(job: Job) -> Job:
    """``ktrain attach NAME``: the job's lines, states and metrics as text until it ends;
    Ctrl-C detaches. A failed or cancelled job raises (the command fails)."""
    from .monitor.live import model_for
    from .monitor.text import TextView

    model = model_for(job)
    commands.follow_into(job, model, TextView(model, cast(IO[str], _ShellOut())), _say)
    return job


class _ShellOut(io.TextIOBase):
    """stdout, with the monitor's hints (``%ktrain logs NAME``) worded for a shell."""

    def write(self, text: str) -> int:
        return sys.stdout.write(for_shell(text))

    def flush(self) -> None:
        sys.stdout.flush()


def for_shell(text: str) -> str:
    """Messages are written for the notebook (``%ktrain list``); a shell user types
    ``ktrain list``, and sets options with ``ktrain config key=value``."""
    return text.replace("%%ktrain --help", "ktrain render --help").replace("%ktrain ", "ktrain ")
