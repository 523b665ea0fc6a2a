"""Find the notebook source of objects the kernel defined, and the cell they came from.

Functions know where their code is (``co_filename``/``co_firstlineno``, and IPython keeps each
cell's text in ``linecache``), so the *live* definition is found even when a name was redefined
in several cells. Classes and lambdas carry no such pointer when they have no methods of their
own; for them the latest cell in the history that binds the name at top level is used.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CaptureError
from .names import top_level_binders

__all__ = ["Located", "cell_label", "locate", "locate_assignment"]


@dataclass(frozen=True)
class Located:
    """Verbatim source of one top-level statement and where it came from."""

    source: str
    cell: int | None  # execution count of the defining cell, when known
    line: int  # line of the statement inside its cell


def cell_label(cell: int | None) -> str:
    return f"cell [{cell}]" if cell else "an earlier cell"


def _segment(text: str, node: ast.stmt) -> str:
    lines = text.splitlines(keepends=True)
    decorators = getattr(node, "decorator_list", [])
    start = min([node.lineno] + [d.lineno for d in decorators])
    end = node.end_lineno or node.lineno
    chunk = "".join(lines[start - 1 : end])
    return chunk if chunk.endswith("\n") else chunk + "\n"


def _cell_of(text: str, history: Sequence[str]) -> int | None:
    wanted = text.strip()
    for index in range(len(history) - 1, 0, -1):
        if history[index].strip() == wanted:
            return index
    return None


def _from_file(filename: str, line: int, name: str, history: Sequence[str]) -> Located | None:
    text = "".join(linecache.getlines(filename))
    if not text:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        end = node.end_lineno or node.lineno
        if node.name == name and start <= line <= end:
            return Located(_segment(text, node), _cell_of(text, history), start)
    return None


def _method_lines(cls: type) -> list[tuple[str, int]]:
    found = []
    for value in vars(cls).values():
        func = value.fget if isinstance(value, property) else value
        func = getattr(func, "__func__", func)
        code = getattr(func, "__code__", None)
        qual = getattr(func, "__qualname__", "")
        if code is not None and qual.startswith(cls.__qualname__ + "."):
            found.append((code.co_filename, code.co_firstlineno))
    return found


def locate_assignment(name: str, history: Sequence[str]) -> Located | None:
    """The latest top-level statement in the history that binds ``name``."""
    for index in range(len(history) - 1, 0, -1):
        binders = top_level_binders(history[index], name)
        if binders:
            return Located(_segment(history[index], binders[-1]), index, binders[-1].lineno)
    return None


def locate(name: str, obj: Any, history: Sequence[str]) -> Located:
    """Source of a function, class or lambda the notebook defined under ``name``."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    located: Located | None = None
    if isinstance(target, types.FunctionType) and target.__name__ != "<lambda>":
        code = target.__code__
        located = _from_file(code.co_filename, code.co_firstlineno, target.__name__, history)
    elif isinstance(target, type):
        for filename, line in _method_lines(target):
            located = _from_file(filename, line, target.__name__, history)
            if located:
                break
    if located is None:
        real = getattr(target, "__name__", name)
        located = locate_assignment(name if real == "<lambda>" else real, history)
    if located is None:
        raise CaptureError(
            f"Cannot find the source of {name!r} ({type(obj).__name__}) in this notebook's "
            f"history, so it cannot be sent to the job. Define it in a notebook cell (not with "
            f"exec or an interactive tool) and run that cell again."
        )
    return located
