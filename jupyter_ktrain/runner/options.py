"""What a run is asked for, as one object: :class:`RunOptions`.

Every front end makes one and hands it to the runner; nothing else of the front end travels.
The magic parses its line (:meth:`CellOptions.from_line`: the run's options, and the sweep's
when the line asks for one); ``ktrain.run`` takes the same flags as keywords
(:meth:`RunOptions.from_keywords`: ``procs_per_node=2`` is ``--procs-per-node 2``), turned
into the same argument list and read by the same parser, so both get the same checks and the
same errors. A run knows nothing of sweeps: a sweep is a client above the runner.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from ..flags import build_parser, env_names, parse_flags, spec_from_values, values_from_args
from ..spec.job import JobSpec
from ..sweep_spec.sweep_options import SWEEP_DESTS, SweepOptions, sweep_options

__all__ = ["CellOptions", "RunOptions"]

_SWEEP_KEYWORDS = frozenset({"sweep", *SWEEP_DESTS})  # ktrain.sweep's own arguments
_NOT_KEYWORDS = frozenset({"help"}) | _SWEEP_KEYWORDS  # flags of the cell that are no job option


@dataclass(frozen=True)
class RunOptions:
    """A run's options. ``values`` are the job's values as a YAML job file holds them (what
    the user gave, nothing defaulted: MLflow records them as the run's flags); the rest says
    how the run goes: where (``backend``, None for the configured one), whether it only
    prints the plan (``dry_run``), returns at once (``detach``), replaces an earlier job of its
    name first (``replace``); which secrets may travel anyway (``allow_secrets``) and which
    variables the job gets by reference (``by_reference``: ``--env NAME``, ``--secret-env``)."""

    values: Mapping[str, Any] = field(default_factory=dict)
    backend: str | None = None
    dry_run: bool = False
    detach: bool = False
    replace: bool = False
    allow_secrets: tuple[str, ...] = ()
    by_reference: frozenset[str] = frozenset()
    help: bool = False

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> RunOptions:
        """From the parsed flags of ``%%ktrain`` (:func:`~jupyter_ktrain.flags.build_parser`):
        the job's; a sweep's are :class:`CellOptions`'s, and one given without ``--sweep`` is
        one error."""
        if not getattr(ns, "sweep", None):
            given = [d for d in SWEEP_DESTS if getattr(ns, d, None) not in (None, False)]
            if given:
                flags = ", ".join("--" + d.replace("_", "-") for d in given)
                raise SpecError(f"{flags} only apply to a sweep: add --sweep NAME=DIST.")
        return cls(
            values=values_from_args(ns),
            backend=ns.backend,
            dry_run=bool(ns.dry_run),
            detach=bool(ns.detach),
            replace=bool(ns.replace),
            allow_secrets=tuple(ns.allow_secret or ()),
            by_reference=frozenset(env_names(ns)),
            help=bool(ns.help),
        )

    @classmethod
    def from_line(cls, line: str) -> RunOptions:
        """The ``%%ktrain`` line's job flags (its sweep flags: :class:`CellOptions`). Bad
        flags: one :class:`SpecError`."""
        return cls.from_namespace(parse_flags(line))

    @classmethod
    def from_keywords(cls, **keywords: Any) -> RunOptions:
        """``ktrain.run``'s keyword options: each a ``%%ktrain`` flag, ``-`` written ``_``
        (``nodes=2``, ``procs_per_node=2``, ``warm=True``, ``env={"A": "1", "HF_TOKEN":
        None}``, ``label={"team": "nlp"}``, ``volume=["data:/data"]``); None or False leaves a
        flag out. An unknown keyword is one error naming the nearest option."""
        return cls.from_namespace(build_parser().parse_args(keyword_argv(keywords)))

    def spec(self, entry: str) -> JobSpec:
        """The validated spec: ``entry`` (the function called) names the job when no name
        was given; the configured backend runs it when none was."""
        return spec_from_values(self.values, entry, self.backend)


@dataclass(frozen=True)
class CellOptions:
    """A ``%%ktrain`` line's flags: the run's options (``run``) and the sweep its sweep flags
    ask for (``sweep``: ``--sweep``; None for one run)."""

    run: RunOptions
    sweep: SweepOptions | None = None

    @classmethod
    def from_line(cls, line: str) -> CellOptions:
        """The ``%%ktrain`` line's flags. Bad flags: one :class:`SpecError` (a sweep flag
        without ``--sweep``, ``--detach``/``--dry-run`` with it)."""
        ns = parse_flags(line)
        sweep = sweep_options(ns) if ns.sweep else None  # a plain cell's path goes on at once
        if sweep is not None and (ns.detach or ns.dry_run):
            flag = "--detach" if ns.detach else "--dry-run"
            raise SpecError(
                f"{flag} does not go with --sweep: a sweep follows its trials to pick the next "
                f"ones. Drop {flag} (or --sweep, to {flag[2:]} one run of the cell)."
            )
        return cls(RunOptions.from_namespace(ns), sweep)


def _actions() -> dict[str, argparse.Action]:
    parser = build_parser()
    return {
        a.dest: a
        for a in parser._actions  # the parser's own table: the flags as the cell knows them
        if a.option_strings and a.dest not in _NOT_KEYWORDS
    }


def keyword_argv(keywords: Mapping[str, Any]) -> list[str]:
    """``{"nodes": 2, "warm": True, "env": {"A": "1"}}`` -> ``["--nodes", "2", "--warm",
    "--env", "A=1"]``: the flags of the cell the keywords stand for."""
    actions = _actions()
    argv: list[str] = []
    for key, value in keywords.items():
        action = actions.get(key)
        if action is None:
            raise SpecError(_unknown(key, actions))
        flag = action.option_strings[-1]
        if value is None or value is False:
            continue
        if action.nargs == 0:  # a switch: --warm, --bf16, --dry-run
            if value is not True:
                raise SpecError(f"{key}= is a switch: pass {key}=True (or leave it out).")
            argv.append(flag)
            continue
        items = _items(key, value) if isinstance(action, argparse._AppendAction) else [value]
        for item in items:
            argv += [flag, _text(key, item)]
    return argv


def _items(key: str, value: Any) -> list[Any]:
    """A repeatable flag's values: one value, a list of them, or a mapping (``KEY=VALUE``;
    a None value is ``KEY`` alone)."""
    if isinstance(value, Mapping):
        return [k if v is None else f"{k}={v}" for k, v in value.items()]
    if isinstance(value, (str, os.PathLike)) or not isinstance(value, Collection):
        return [value]
    return list(value)


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        raise SpecError(f"{key}={value!r} takes a value, not True/False: e.g. {key}=2.")
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    if isinstance(value, (str, int, float)):
        return str(value)
    raise SpecError(
        f"{key}= takes text or a number, got {type(value).__name__}: pass it as the "
        f"%%ktrain flag's value would be written."
    )


def _unknown(key: str, actions: Mapping[str, argparse.Action]) -> str:
    if key in _SWEEP_KEYWORDS:
        return (
            f"{key}= is an argument of a sweep: call ktrain.sweep(func, space, trials=..., "
            f"objective=...) to run many trials; ktrain.run runs one."
        )
    near = difflib.get_close_matches(key, list(actions), n=1)
    hint = f" Did you mean {near[0]}=?" if near else ""
    return (
        f"ktrain.run got an unknown option {key}=.{hint} Its options are the %%ktrain flags "
        f"with _ for - (`%%ktrain --help` lists them); the function's own arguments go in "
        f"args=(...) and kwargs={{...}}."
    )
