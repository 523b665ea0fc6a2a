"""Encode a notebook value so it travels to the job byte-for-byte.

Plain literals (numbers, strings, bytes, containers of them) become Python literals in the
program, which is readable and exact. Everything else is pickled (protocol 4, readable by any
Python >= 3.8) into one stream for the whole program (:func:`encode_together`), embedded as
base64, which no shell, YAML or heredoc can alter. Objects that
only make sense in this process (open files, sockets, locks, generators, CUDA tensors) are
refused with the path to the offending part.
"""

from __future__ import annotations

import ast
import io
import math
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LOAD_NEXT",
    "MAX_VALUE_BYTES",
    "EncodeFailure",
    "Encoded",
    "encode_together",
    "encode_value",
]

MAX_VALUE_BYTES = 16 * 1024 * 1024
LOAD_NEXT = "_KTRAIN_VALUES.load()"  # a pickled value: the next one in the program's stream
_LITERAL_LIMIT = 20_000
_PLAIN = (type(None), bool, int, float, complex, str, bytes)


@dataclass(frozen=True)
class Encoded:
    """``expression`` rebuilds the value in the program; ``main_refs`` are notebook-defined
    classes/functions the pickle refers to by name (they must be defined before it)."""

    expression: str
    main_refs: frozenset[str]
    size: int
    pickled: bytes = b""  # the pickle, when the value is one


class EncodeFailure(Exception):
    """The value cannot travel; ``reason`` says why and ``hint`` what to do instead."""

    def __init__(self, reason: str, hint: str, *, rebuildable: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.hint = hint
        self.rebuildable = rebuildable  # only a function by value is in the way: the
        # statement that built the value can rebuild it in the job


def _is_literal(value: Any, depth: int = 0) -> bool:
    if depth > 20:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if type(value) in _PLAIN:
        return True
    if type(value) in (list, tuple, set):
        return all(_is_literal(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(
            _is_literal(k, depth + 1) and _is_literal(v, depth + 1) for k, v in value.items()
        )
    return False


def _literal(value: Any) -> str | None:
    if not _is_literal(value):
        return None
    text = repr(value)
    if len(text) > _LITERAL_LIMIT:
        return None
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return text if type(back) is type(value) and back == value else None


def _refuse(obj: Any) -> EncodeFailure | None:
    """Known objects that pickle fine but must not travel."""
    kind = type(obj)
    if kind.__module__.startswith("torch") and getattr(obj, "is_cuda", False):
        return EncodeFailure(
            "it is a tensor on a CUDA device",
            "move it to the CPU first (value.cpu()), or create it inside the function",
        )
    return None


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, is_main: Callable[[Any], str | None]):
        super().__init__(file, protocol=4)
        self.main_refs: set[str] = set()
        self._is_main = is_main

    def reducer_override(self, obj: Any) -> Any:
        refused = _refuse(obj)
        if refused:
            raise refused
        name = self._is_main(obj)
        if name is not None:
            self.main_refs.add(name)
        return NotImplemented


def _describe(exc: Exception) -> EncodeFailure:
    text = str(exc)
    if "lambda" in text or "local object" in text or "<locals>" in text:
        return EncodeFailure(
            f"it holds a function that cannot be imported by name ({text})",
            "define that function with `def` at the top level of a cell",
            rebuildable=True,
        )
    return EncodeFailure(
        f"it cannot be serialised ({type(exc).__name__}: {text})",
        "create it inside the function that runs on the job (open files, sockets, locks, "
        "clients and generators only live in this kernel), or pass plain data instead",
    )


def _dump(pickler: _Pickler, value: Any) -> None:
    try:
        with warnings.catch_warnings():
            # torch pickles a tensor through its (deprecated) TypedStorage: not the user's doing
            warnings.filterwarnings("ignore", message=".*TypedStorage is deprecated")
            pickler.dump(value)
    except EncodeFailure:
        raise
    except (pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        raise _describe(exc) from None


def encode_value(value: Any, is_main: Callable[[Any], str | None]) -> Encoded:
    """Encode ``value``; ``is_main(obj)`` names notebook-defined classes/functions it meets."""
    literal = _literal(value)
    if literal is not None:
        return Encoded(literal, frozenset(), len(literal))
    refused = _refuse(value)
    if refused:
        raise refused
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, is_main)
    _dump(pickler, value)
    data = buffer.getvalue()
    if len(data) > MAX_VALUE_BYTES:
        raise EncodeFailure(
            f"it is {len(data) / 2**20:.1f} MiB, over the {MAX_VALUE_BYTES // 2**20} MiB limit "
            f"for values shipped inside the program",
            "load or build the data inside the function (from a dataset volume or a URL)",
        )
    return Encoded(LOAD_NEXT, frozenset(pickler.main_refs), len(data), data)


def encode_together(values: list[Any], is_main: Callable[[Any], str | None]) -> bytes:
    """One pickle stream of ``values``, dumped in order by one pickler: an object reached from
    several values (a model's parameters held by its optimizer, two names for one list) is
    written once and comes back as one object when the values are loaded in the same order
    by one unpickler. Each value was checked alone by :func:`encode_value` first."""
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, is_main)
    for value in values:
        _dump(pickler, value)
    return buffer.getvalue()
