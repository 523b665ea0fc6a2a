"""The job flags given, and YAML job files, as *values*; the ``%%ktrain`` parser; values as a
:class:`JobSpec` (the table of flags is :mod:`.table`).

Every mistake becomes one :class:`SpecError` that names the flag and what to do; nothing calls
``sys.exit`` inside a kernel.
"""

from __future__ import annotations

import argparse
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml

from ..errors import SpecError
from ..spec.job import BACKENDS, JobSpec, default_name
from .table import JOB_FLAGS, Flag

__all__ = [
    "add_job_flags",
    "build_parser",
    "env_names",
    "merge_values",
    "parse_flags",
    "spec_from_args",
    "spec_from_values",
    "spec_from_yaml",
    "values_from_args",
    "values_from_yaml",
]


def _job_flags() -> list[Flag]:
    return [flag for _, flags in JOB_FLAGS for flag in flags]


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """Add every job flag (all optional: an absent flag leaves the value to YAML or the spec's
    default) to ``parser``."""
    for title, flags in JOB_FLAGS:
        group = parser if title is None else parser.add_argument_group(title)
        for flag in flags:
            group.add_argument(flag.name, dest=flag.dest, **flag.options)


def values_from_args(ns: argparse.Namespace) -> dict[str, Any]:
    """The values (as in a YAML job file) of the job flags given in ``ns``.

    Raises :class:`SpecError` for flags that only apply with another flag or conflict."""
    given = [f for f in _job_flags() if getattr(ns, f.dest, None) is not None]
    if {"--bf16", "--fp16"} <= {f.name for f in given}:
        raise SpecError("--bf16 and --fp16 conflict: pick one precision.")
    values: dict[str, Any] = {}
    for flag in given:
        *parents, key = flag.to.split(".")
        into = values
        for parent in parents:
            into = into.setdefault(parent, {})
        into[key] = getattr(ns, flag.dest)
    _check_presets(values, given)
    env = values.pop("env", None) or []
    if any(v is not None for _, v in env):
        values["env"] = [(k, v) for k, v in env if v is not None]
    if any(v is None for _, v in env):
        values["pass_env"] = [k for k, v in env if v is None]
    return values


def _check_presets(values: dict[str, Any], given: list[Flag]) -> None:
    """Tuning flags of DeepSpeed and of the network need the flag that picks the preset."""
    deepspeed = values.get("deepspeed")
    if deepspeed is not None and "preset" not in deepspeed:
        used = sorted(f.name for f in given if f.to.startswith("deepspeed."))
        raise SpecError(
            f"{', '.join(used)} only apply with --deepspeed: add --deepspeed "
            f"zero1|zero2|zero3|PATH, or set them in your training code."
        )
    rdma = values.get("rdma")
    if rdma is not None and "preset" not in rdma:
        if rdma.get("host_network"):
            raise SpecError(
                "--host-network needs a network profile: add --rdma infiniband|roce|tcp "
                "(it sets the NCCL interfaces for the host's network)."
            )
        raise SpecError("--rdma-profiles holds the profiles --rdma picks from: add --rdma NAME.")


def env_names(ns: argparse.Namespace) -> set[str]:
    """Variables the job gets by reference: ``--env KEY`` and ``--secret-env KEY=...``."""
    names = {k for k, v in ns.env or () if v is None}
    for item in getattr(ns, "secret_env", None) or []:
        names.add(str(item).split("=", 1)[0])
    return names


# --------------------------------------------------------------------------- YAML job files


def values_from_yaml(path_or_text: str | os.PathLike[str]) -> dict[str, Any]:
    """The values of a YAML job file (or YAML text). A relative file name in it (``rdma``,
    ``deepspeed``) is the file beside the job file, when there is one."""
    text = str(path_or_text)
    folder: Path | None = None
    if "\n" not in text and Path(text).is_file():
        folder = Path(text).resolve().parent
        text = Path(text).read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"The job spec is not valid YAML: {exc}.") from None
    if not isinstance(data, dict):
        raise SpecError(
            f"The job spec must be a YAML mapping of job options (name, nodes, ...), got "
            f"{type(data).__name__}: check the file passed with -f."
        )
    return data if folder is None else _files_beside(data, folder)


def _files_beside(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    def beside(name: Any) -> Any:
        there = folder / str(name)
        return str(there) if not os.path.isabs(str(name)) and there.is_file() else name

    out = dict(data)
    for key in ("rdma", "deepspeed"):
        value = out.get(key)
        if isinstance(value, str):
            out[key] = beside(value)
        elif isinstance(value, dict):
            out[key] = {k: beside(v) if k in ("file", "profiles") else v for k, v in value.items()}
    return out


def spec_from_yaml(path_or_text: str | os.PathLike[str], **overrides: Any) -> JobSpec:
    """A :class:`JobSpec` from a YAML file (or YAML text); ``overrides`` win over the file."""
    return JobSpec.create(**{**values_from_yaml(path_or_text), **overrides})


def merge_values(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``: mappings merge key by key, anything else in ``top`` replaces."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


# --------------------------------------------------------------------------- %%ktrain


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SpecError(f"{message}. See `{self.prog} --help` for every flag.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise SpecError(message or f"{self.prog}: stopped")


def build_parser(prog: str = "%%ktrain") -> argparse.ArgumentParser:
    """The flags of ``%%ktrain``: the job flags, and how the cell runs the job."""
    p = _Parser(prog=prog, add_help=False, allow_abbrev=False)
    p.add_argument("-h", "--help", action="store_true", help="show the flags and exit")
    add_job_flags(p)
    p.add_argument("--backend", choices=BACKENDS, default=None, help="where to run (default local)")
    p.add_argument("--dry-run", action="store_true", help="print the exact launch; run nothing")
    p.add_argument("--detach", action="store_true", help="submit and return at once; do not follow")
    p.add_argument(
        "--replace",
        action="store_true",
        help="delete an earlier job of the same --name first (re-running a named cell)",
    )
    _add_sweep_flags(p.add_argument_group("sweep (many trials of the cell; README: Sweeps)"))
    return p


def _add_sweep_flags(g: argparse._ArgumentGroup) -> None:
    """The sweep's flags (read by :func:`jupyter_ktrain.sweep_spec.sweep_options.sweep_options`)."""
    g.add_argument(
        "--sweep",
        action="append",
        metavar="NAME=DIST",
        help="a name the cell reads, bound per trial: uniform(a,b), loguniform(a,b), "
        "intuniform(a,b), choice(v1,v2,...); repeat for each name",
    )
    g.add_argument("--trials", type=int, metavar="N", help="trials (default 10; grid: all)")
    g.add_argument("--parallel", type=int, metavar="P", help="trials at once (default 1)")
    g.add_argument(
        "--objective",
        metavar="NAME:min|max",
        help="the reported metric's last value (ktrain.report), or result:max (the cell's value)",
    )
    g.add_argument(
        "--search",
        choices=("grid", "random", "tpe"),
        help="Optuna's sampler (default tpe; grid when every name is a choice)",
    )
    g.add_argument(
        "--prune-after",
        type=int,
        metavar="STEPS",
        help="stop a trial worse than the median of the others at a step after this (default 5)",
    )
    g.add_argument("--no-prune", action="store_true", help="run every trial to its end")
    g.add_argument(
        "--stop-on-failure", action="store_true", help="end the sweep at the first failed trial"
    )


def parse_flags(line: str, prog: str = "%%ktrain") -> argparse.Namespace:
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise SpecError(f"{prog}: cannot split the flags ({exc}); check the quotes.") from None
    return build_parser(prog).parse_args(argv)


def _default_backend() -> str:
    from ..backends.registry import default_backend_name

    return default_backend_name()


def spec_from_values(values: Mapping[str, Any], entry: str, backend: str | None) -> JobSpec:
    """A validated JobSpec from job ``values``: ``entry`` (the function called) names the
    job when no name was given, the configured backend runs it when ``backend`` is None."""
    values = dict(values)
    values.setdefault("name", default_name(entry))
    values["backend"] = backend or _default_backend()
    return JobSpec.create(**values)


def spec_from_args(ns: argparse.Namespace, entry: str = "ktrain", **defaults: Any) -> JobSpec:
    """A validated JobSpec from ``%%ktrain`` flags; ``entry`` names the job when --name is
    absent, and the configured backend runs it when --backend is."""
    return spec_from_values(values_from_args(ns), entry, ns.backend or defaults.get("backend"))
