"""The ``ktrain`` console script: ``ktrain render`` (manifests for git), ``ktrain list``,
``ktrain logs NAME``, ``ktrain status NAME``, ``ktrain cancel NAME``, ``ktrain delete NAME``."""

from __future__ import annotations

import sys

from .errors import KtrainError

__all__ = ["main"]

_USAGE = """usage: ktrain COMMAND [ARGS]

  render [flags | -f spec.yaml]   print the Kubernetes objects of a job (YAML)
  list                            jobs this machine knows
  status NAME | logs NAME [--rank R] [--grep TEXT] | cancel NAME | delete NAME
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
        from .magics import run_line_command

        result = run_line_command(args)
        if result is not None:
            print(result)
        return 0
    except KtrainError as exc:
        print(f"ktrain: {exc}", file=sys.stderr)
        return 1
