"""Encode a notebook value so it travels to the job byte-for-byte.

Plain literals (numbers, strings, bytes, containers of them) become Python literals in the
program, which is readable and exact. Everything else is pickled (protocol 4, readable by any
Python >= 3.8) into one stream for the whole program (:func:`encode_together`), embedded as
base64, which no shell, YAML or heredoc can alter. Objects that
only make sense in this process (open files, sockets, locks, generators, CUDA tensors) are
refused with the path to the offending part.

A value over :data:`MAX_VALUE_BYTES` is refused before it is copied: its buffers (bytes,
strings, numpy arrays, torch tensors' storages, reached through containers and attributes)
are counted first, and the pickler writes to a sink that stops it as soon as its output
passes the limit, so a 500 MB global costs no second 500 MB.
"""

from __future__ import annotations

import ast
import io
import math
import pickle
import sys
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
    "too_big",
]

MAX_VALUE_BYTES = 16 * 1024 * 1024
LOAD_NEXT = "_KTRAIN_VALUES.load()"  # a pickled value: the next one in the program's stream
_LITERAL_LIMIT = 20_000
_MAX_NODES = 200_000  # a bound on the walk that counts a value's buffers
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


def _buffer_size(obj: Any) -> int | None:
    """The bytes of data ``obj`` holds itself, where that is known without copying it."""
    if isinstance(obj, str | bytes | bytearray):
        return len(obj)
    if isinstance(obj, memoryview):
        return obj.nbytes
    module = type(obj).__module__
    if module.startswith("torch") and hasattr(obj, "untyped_storage"):
        try:  # pickled whole, views included; a sparse or meta tensor counts nothing
            return int(obj.untyped_storage().nbytes())
        except (RuntimeError, NotImplementedError, TypeError):
            return 0
    if module.startswith("numpy") and isinstance(getattr(obj, "nbytes", None), int):
        dtype = getattr(obj, "dtype", None)
        return None if getattr(dtype, "hasobject", False) else int(obj.nbytes)
    return None


def _references(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, list | tuple | set | frozenset):
        return list(obj)
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(obj, type):
        return list(attrs.values())
    return []


def _size_floor(value: Any, limit: int = MAX_VALUE_BYTES) -> int:
    """A lower bound on the pickled size of ``value``, counted without copying it: its
    buffers and one byte per object, through containers and attributes, until it passes
    ``limit`` or the walk's bound."""
    total, seen, todo = 0, set(), [value]
    for _ in range(_MAX_NODES):
        if not todo or total > limit:
            break
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        size = _buffer_size(obj)
        total += 1 if size is None else size
        if size is None:
            todo.extend(_references(obj))
    return total


def _over(floor: int | None) -> EncodeFailure:
    """Too big: at least ``floor`` bytes of data, or (None) a pickle that passed the limit."""
    limit = f"the {MAX_VALUE_BYTES // 2**20} MiB limit for values shipped inside the program"
    return EncodeFailure(
        f"it is at least {floor / 2**20:.1f} MiB, over {limit}"
        if floor is not None
        else f"its pickle passes {limit}",
        "load or build the data inside the function (from a dataset volume or a URL)",
    )


def too_big(value: Any) -> EncodeFailure | None:
    """Why ``value`` is too big to ship, known without pickling it, or None."""
    floor = _size_floor(value, sys.maxsize)  # counted on (to the walk's bound) for the message
    return _over(floor) if floor > MAX_VALUE_BYTES else None


def _literal(value: Any) -> str | None:
    if _size_floor(value, _LITERAL_LIMIT) > _LITERAL_LIMIT or not _is_literal(value):
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


class _TooBig(Exception):
    pass


class _BoundedBuffer(io.BytesIO):
    """A pickle's sink that stops the pickler once ``limit`` bytes have been written."""

    def __init__(self, limit: int):
        super().__init__()
        self._limit = limit

    def write(self, data: Any) -> int:
        if self.tell() + memoryview(data).nbytes > self._limit:
            raise _TooBig
        return super().write(data)


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
    except _TooBig:
        raise _over(None) from None
    except (pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        raise _describe(exc) from None


def encode_value(value: Any, is_main: Callable[[Any], str | None]) -> Encoded:
    """Encode ``value``; ``is_main(obj)`` names notebook-defined classes/functions it meets."""
    literal = _literal(value)
    if literal is not None:
        return Encoded(literal, frozenset(), len(literal))
    refused = _refuse(value) or too_big(value)
    if refused:
        raise refused
    buffer = _BoundedBuffer(MAX_VALUE_BYTES)
    pickler = _Pickler(buffer, is_main)
    _dump(pickler, value)
    data = buffer.getvalue()
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
