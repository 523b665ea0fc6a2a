"""A sweep's search space, from the text a user writes: ``lr=loguniform(1e-5,1e-3)``.

The distributions: ``uniform(a,b)``, ``loguniform(a,b)`` (a > 0), ``intuniform(a,b)`` (also
``int(a,b)``; both ends included) and ``choice(v1,v2,...)`` (numbers, strings, True/False/None).
Pure: the text is read with :mod:`ast` (literals only, nothing is evaluated).
"""

from __future__ import annotations

import ast
import keyword
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError

__all__ = ["FORMS", "Param", "parse_param"]

FORMS = "uniform(a,b), loguniform(a,b), intuniform(a,b) or choice(v1,v2,...)"
_KINDS = {"uniform": "uniform", "loguniform": "loguniform", "intuniform": "int", "int": "int",
          "choice": "choice"}  # fmt: skip


@dataclass(frozen=True)
class Param:
    """One swept name: ``kind`` is ``uniform``, ``loguniform``, ``int`` or ``choice``;
    ``low``/``high`` bound the first three, ``choices`` lists a choice's values."""

    name: str
    kind: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[Any, ...] = ()

    @property
    def discrete(self) -> bool:
        """Its values can be listed (a grid takes it)."""
        return self.kind in ("int", "choice")

    def values(self) -> list[Any]:
        """Every value of a discrete parameter, in order (a grid's axis)."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1))
        raise ValueError(f"{self.name} is continuous")

    def __str__(self) -> str:
        if self.kind == "choice":
            return f"{self.name}=choice({', '.join(map(repr, self.choices))})"
        kind = "intuniform" if self.kind == "int" else self.kind
        low, high = (int(self.low), int(self.high)) if self.kind == "int" else (self.low, self.high)
        return f"{self.name}={kind}({low:g}, {high:g})"


def _bad(text: str, why: str) -> SpecError:
    return SpecError(f"--sweep {text!r}: {why}. Write NAME=DIST, DIST one of {FORMS}.")


def parse_param(text: str) -> Param:
    """``"lr=loguniform(1e-5,1e-3)"`` -> :class:`Param`; anything else is one
    :class:`SpecError` saying what is wrong."""
    name, sep, dist = text.partition("=")
    name, dist = name.strip(), dist.strip()
    if not sep or not name:
        raise _bad(text, "no NAME= before the distribution")
    if not name.isidentifier() or keyword.iskeyword(name):
        raise _bad(text, f"{name!r} is not a Python name the cell can read")
    try:
        call = ast.parse(dist, mode="eval").body
    except SyntaxError:
        raise _bad(text, f"{dist!r} does not read as a distribution") from None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) or call.keywords:
        raise _bad(text, f"{dist!r} is not a distribution")
    kind = _KINDS.get(call.func.id)
    if kind is None:
        raise _bad(text, f"unknown distribution {call.func.id!r}")
    try:
        args = [ast.literal_eval(a) for a in call.args]
    except ValueError:
        raise _bad(text, "its values must be literals (numbers, strings, True, False)") from None
    if kind == "choice":
        if not args:
            raise _bad(text, "choice() needs at least one value")
        if len(set(map(repr, args))) < len(args):
            raise _bad(text, "choice() lists a value twice")
        return Param(name, kind, choices=tuple(args))
    return _ranged(text, name, kind, args)


def _ranged(text: str, name: str, kind: str, args: list[Any]) -> Param:
    numbers = all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
    if len(args) != 2 or not numbers:
        raise _bad(text, f"{kind}(a,b) takes two numbers")
    low, high = float(args[0]), float(args[1])
    if kind == "int" and not all(isinstance(a, int) for a in args):
        raise _bad(text, "intuniform(a,b) takes two integers")
    if not low < high:
        raise _bad(text, f"its low end {args[0]} must be below its high end {args[1]}")
    if kind == "loguniform" and low <= 0:
        raise _bad(text, "loguniform(a,b) needs a > 0")
    return Param(name, kind, low, high)
