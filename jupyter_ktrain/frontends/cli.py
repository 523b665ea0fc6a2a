"""The ``ktrain`` console script: ``ktrain render`` (manifests for git), and the line commands
of :mod:`.commands` (``ktrain list``, ``ktrain logs NAME``, ``ktrain status NAME``, ...) with
their replies printed as text, worded for a shell. No IPython here."""

from __future__ import annotations

import sys

from ..errors import KtrainError, SpecError
from ..runner.follow import follow
from ..runner.front import TextFront, shell_words
from . import commands

__all__ = ["main"]

_RENDER = ("render [flags | -f spec.yaml]", "print the Kubernetes objects of a job (YAML)")
_EXIT = "Exit status: 0 done, 1 the command failed (the message says why), 2 bad usage.\n"


def usage() -> str:
    """``ktrain --help``: ``render`` and every command of the table, worded for a shell."""
    text = commands.help_text("ktrain ", extra=[_RENDER])
    return shell_words(f"usage: ktrain COMMAND [ARGS]\n\n{text}\n{_EXIT}")


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
            follow(reply.follow, TextFront(reword=shell_words))  # Ctrl-C detaches
            _say(repr(reply.follow))
        return 0
    except KtrainError as exc:
        print(shell_words(f"ktrain: {exc}"), file=sys.stderr)
        return 2 if isinstance(exc, SpecError) else 1  # bad usage, or the command failed


def _say(text: str) -> None:
    TextFront(reword=shell_words).say(text)
