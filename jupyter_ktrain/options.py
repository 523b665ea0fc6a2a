"""The flags of ``%%ktrain`` and ``ktrain``: one parser for the magic and the console script.

Every mistake becomes one :class:`SpecError` that names the flag and what to do; nothing calls
``sys.exit`` inside a kernel.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any, NoReturn

from .errors import SpecError
from .spec import BACKENDS, JobSpec, default_name

__all__ = ["build_parser", "env_names", "parse_flags", "spec_from_args"]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SpecError(f"{message}. See `{self.prog} --help` for every flag.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise SpecError(message or f"{self.prog}: stopped")


def _env_item(text: str) -> tuple[str, str | None]:
    """``KEY=VALUE``, or ``KEY`` alone: the kernel's value, passed through the environment."""
    key, sep, value = text.partition("=")
    if not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE or KEY, got {text!r}")
    return key, value if sep else None


def build_parser(prog: str = "%%ktrain") -> argparse.ArgumentParser:
    p = _Parser(prog=prog, add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true", help="show the flags and exit")
    p.add_argument("--name", help="job name (DNS-1035 label); default: from the function called")
    p.add_argument("--nodes", type=int, default=1, help="replicas (pods, or local torchrun agents)")
    p.add_argument(
        "--procs-per-node", type=int, default=None, help="processes per node (default: one per GPU)"
    )
    p.add_argument("--backend", choices=BACKENDS, default=None, help="where to run (default local)")
    p.add_argument(
        "--env",
        action="append",
        type=_env_item,
        default=[],
        metavar="KEY=VALUE|KEY",
        help="set a variable in every process; KEY alone passes the kernel's value (local)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the exact launch; run nothing")
    p.add_argument("--detach", action="store_true", help="submit and return at once; do not follow")
    p.add_argument(
        "--replace",
        action="store_true",
        help="delete an earlier job of the same --name first (re-running a named cell)",
    )
    from .cluster_options import add_arguments

    add_arguments(p)
    return p


def parse_flags(line: str, prog: str = "%%ktrain") -> argparse.Namespace:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise SpecError(f"{prog}: cannot split the flags ({exc}); check the quotes.") from None
    return build_parser(prog).parse_args(argv)


def env_names(ns: argparse.Namespace) -> set[str]:
    """Variables the job gets by reference: ``--env KEY`` and ``--secret-env KEY=...``."""
    names = {k for k, v in ns.env if v is None}
    for item in getattr(ns, "secret_env", None) or []:
        names.add(str(item).split("=", 1)[0])
    return names


def _default_backend() -> str:
    from .backends import default_backend_name

    return default_backend_name()


def spec_from_args(ns: argparse.Namespace, entry: str = "ktrain", **defaults: Any) -> JobSpec:
    """A validated JobSpec from parsed flags; ``entry`` names the job when --name is absent."""
    from .cluster_options import spec_kwargs

    kwargs: dict[str, Any] = {
        "name": ns.name or default_name(entry),
        "nodes": ns.nodes,
        "procs_per_node": ns.procs_per_node,
        "backend": ns.backend or defaults.get("backend") or _default_backend(),
        "env": tuple((k, v) for k, v in ns.env if v is not None),
        "pass_env": tuple(k for k, v in ns.env if v is None),
        **spec_kwargs(ns),
    }
    return JobSpec.create(**kwargs)
