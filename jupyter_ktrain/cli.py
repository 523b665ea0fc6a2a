"""The ``ktrain`` console script: ``ktrain render`` (manifests for git), ``ktrain list``,
``ktrain logs NAME``, ``ktrain status NAME``, ``ktrain cancel NAME``, ``ktrain delete NAME``."""

from __future__ import annotations

import sys

from .errors import KtrainError, SpecError

__all__ = ["for_shell", "main"]

_USAGE = """usage: ktrain COMMAND [ARGS]

  render [flags | -f spec.yaml]   print the Kubernetes objects of a job (YAML)
  list                            jobs of every backend (local, and the configured cluster)
  status NAME | logs NAME [--rank R] [--grep TEXT] | cancel NAME | delete NAME [--history]
  config [key=value ...]          show or set defaults (backend, kubeconfig, context, ...)

Exit status: 0 done, 1 the command failed (the message says why), 2 bad usage.
"""


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE)
        return 0 if args else 2
    try:
        if args[0] == "render":
            from .cli_render import render_main

            return render_main(args[1:])
        from . import magics

        magics.set_wording(for_shell)
        result = magics.run_line_command(args)
        if result is not None:
            print(for_shell(str(result)))
        return 0
    except KtrainError as exc:
        print(for_shell(f"ktrain: {exc}"), file=sys.stderr)
        return 2 if isinstance(exc, SpecError) else 1  # bad usage, or the command failed


def for_shell(text: str) -> str:
    """Messages are written for the notebook (``%ktrain list``); a shell user types
    ``ktrain list``, and sets options with ``ktrain config key=value``."""
    return text.replace("%%ktrain --help", "ktrain render --help").replace("%ktrain ", "ktrain ")
