"""What a sweep optimises: ``loss:min`` (the last value of the metric ``loss`` that the trial
reported with ``ktrain.report``, from its lowest reporting rank) or ``result:max`` (the cell's
value on rank 0, as ``job.result`` reads it: its trailing expression, else its last
assignment). Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import SpecError

__all__ = ["RESULT", "Objective", "parse_objective"]

RESULT = "result"  # the objective named so is the cell's value, not a metric
_FORM = "NAME:min or NAME:max (e.g. loss:min, accuracy:max, result:max for the cell's value)"


@dataclass(frozen=True)
class Objective:
    """The metric ``name`` (or the cell's value: :data:`RESULT`), and whether lower is better."""

    name: str
    minimize: bool

    @property
    def direction(self) -> str:
        return "minimize" if self.minimize else "maximize"

    @property
    def of_result(self) -> bool:
        return self.name == RESULT

    def better(self, a: float, b: float) -> bool:
        """``a`` is strictly better than ``b``."""
        return a < b if self.minimize else a > b

    def __str__(self) -> str:
        return f"{self.name}:{'min' if self.minimize else 'max'}"


def parse_objective(text: str) -> Objective:
    """``"loss:min"`` -> :class:`Objective`; else one :class:`SpecError`."""
    name, sep, way = text.strip().rpartition(":")
    if not sep or not name.strip() or way.strip().lower() not in ("min", "max"):
        raise SpecError(f"--objective {text!r} is not {_FORM}.")
    return Objective(name.strip(), way.strip().lower() == "min")


def as_number(value: object) -> float | None:
    """A finite float of a reported or returned value (a number, or a numpy or torch scalar);
    None for anything else (a bool, a string, NaN)."""
    if isinstance(value, (bool, str, bytes)) or not hasattr(value, "__float__"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):  # a tensor of more than one value
        return None
    return number if math.isfinite(number) else None
