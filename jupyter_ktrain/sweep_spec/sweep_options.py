"""What a sweep is asked for, as one object: :class:`SweepOptions`, from the ``%%ktrain``
line's sweep flags (:func:`sweep_options`) or ``ktrain.sweep``'s arguments
(:meth:`SweepOptions.create`). Every mistake is one :class:`SpecError` before anything runs.
Pure.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import SpecError
from .objective import Objective, parse_objective
from .space import Param, parse_param

__all__ = [
    "DEFAULT_PRUNE_AFTER",
    "DEFAULT_TRIALS",
    "SEARCHES",
    "SWEEP_DESTS",
    "SweepOptions",
    "space_texts",
    "sweep_options",
]

SEARCHES = ("grid", "random", "tpe")
DEFAULT_TRIALS = 10  # of a random or TPE search; a grid runs its every point
DEFAULT_PRUNE_AFTER = 5  # the warm-up: steps before a trial can be pruned

# the sweep flags of the cell (their argparse dest), each only with --sweep
SWEEP_DESTS = ("trials", "parallel", "objective", "search", "prune_after", "no_prune",
               "stop_on_failure")  # fmt: skip


@dataclass(frozen=True)
class SweepOptions:
    """``params``: the swept names; ``trials``: how many (a grid: at most its size);
    ``parallel``: how many run at once; ``objective``; ``search``: grid, random or tpe;
    ``prune_after``: the warm-up steps of the median rule (None: no pruning);
    ``stop_on_failure``: end the sweep at the first failed trial."""

    params: tuple[Param, ...]
    objective: Objective
    trials: int
    parallel: int = 1
    search: str = "tpe"
    prune_after: int | None = DEFAULT_PRUNE_AFTER
    stop_on_failure: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def grid_size(self) -> int:
        size = 1
        for param in self.params:
            size *= len(param.values())
        return size

    @classmethod
    def create(
        cls,
        params: Sequence[str],
        objective: str | None,
        trials: int | None = None,
        parallel: int | None = None,
        search: str | None = None,
        prune_after: int | None = None,
        no_prune: bool = False,
        stop_on_failure: bool = False,
    ) -> SweepOptions:
        """From the flags' values (None: not given); checked whole."""
        parsed = [parse_param(text) for text in params]
        seen: set[str] = set()
        for param in parsed:
            if param.name in seen:
                raise SpecError(f"--sweep names {param.name!r} twice: sweep each name once.")
            seen.add(param.name)
        if objective is None:
            raise SpecError(
                "A sweep needs --objective NAME:min|max: the metric the trials report "
                "(ktrain.report(loss=...)) to minimise or maximise, or result:max for the "
                "cell's value."
            )
        goal = parse_objective(objective)
        search = search or ("grid" if all(p.kind == "choice" for p in parsed) else "tpe")
        if search not in SEARCHES:
            raise SpecError(f"--search {search!r}: pick one of {', '.join(SEARCHES)}.")
        continuous = [p.name for p in parsed if not p.discrete]
        if search == "grid" and continuous:
            raise SpecError(
                f"--search grid lists every value, but {', '.join(continuous)} is continuous: "
                "give it as choice(...) or intuniform(a,b), or use --search random|tpe."
            )
        for flag, value in (("--trials", trials), ("--parallel", parallel)):
            if value is not None and value < 1:
                raise SpecError(f"{flag} {value}: it takes a number of at least 1.")
        if prune_after is not None and (no_prune or prune_after < 0):
            raise SpecError(
                "--prune-after takes the steps (0 or more) before a trial can be pruned; "
                "--no-prune turns pruning off: give one of them."
            )
        made = cls(tuple(parsed), goal, 0, parallel or 1, search, None, stop_on_failure)
        count = trials or DEFAULT_TRIALS
        if search == "grid":
            count = min(trials or made.grid_size(), made.grid_size())
        after = None if no_prune else (DEFAULT_PRUNE_AFTER if prune_after is None else prune_after)
        return cls(made.params, goal, count, made.parallel, search, after, stop_on_failure)


def sweep_options(ns: argparse.Namespace) -> SweepOptions | None:
    """The sweep the cell's flags ask for; None without ``--sweep`` (another sweep flag
    without it is refused where the run's options are read:
    :meth:`jupyter_ktrain.runner.options.RunOptions.from_namespace`)."""
    if not getattr(ns, "sweep", None):
        return None
    return SweepOptions.create(
        ns.sweep,
        ns.objective,
        ns.trials,
        ns.parallel,
        ns.search,
        ns.prune_after,
        bool(ns.no_prune),
        bool(ns.stop_on_failure),
    )


def space_texts(space: Mapping[str, str] | Sequence[str]) -> list[str]:
    """``ktrain.sweep``'s space, ``{"lr": "loguniform(1e-5,1e-3)"}`` (or the ``--sweep``
    texts as they are), as ``--sweep`` texts."""
    if isinstance(space, Mapping):
        return [f"{name}={dist}" for name, dist in space.items()]
    return [str(text) for text in space]
