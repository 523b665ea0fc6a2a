"""A rank's tracebacks and warnings as the notebook sees them: a program line becomes ``cell
[N]``, line M, and the product's own frames are left out.

The program the kernel writes maps its lines back to the notebook cells they came from
(``_KTRAIN_LINES``, :mod:`jupyter_ktrain.capture.cell_program`); this reads that map. Standard
library only.
"""

from __future__ import annotations

import ast
import linecache
import os
import runpy
import traceback
import warnings
from collections.abc import Iterable

__all__ = ["name_cells_in_warnings", "notebook_frames", "notebook_traceback"]

# the product's frames (jupyter_ktrain/...) and runpy's are left out of a notebook traceback
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OURS = (_PACKAGE_DIR + os.sep, os.path.abspath(runpy.__file__))


def _line_map(program: str) -> list[tuple[int, int, int, int]]:
    """The program's ``_KTRAIN_LINES``: (first line, count, cell, first line in the cell)."""
    try:
        with open(program, encoding="utf-8") as f:
            for line in f:
                if line.startswith("_KTRAIN_LINES = "):
                    return list(ast.literal_eval(line.split("=", 1)[1].strip()))
    except (OSError, ValueError, SyntaxError):
        pass
    return []


def _to_notebook(
    frame: traceback.FrameSummary, program: str, spans: list[tuple[int, int, int, int]]
) -> traceback.FrameSummary | None:
    """The frame as the notebook sees it: a program line becomes ``cell [N]``, line M; the
    product's own frames (the rank's runtime, runpy, the program's glue) are left out."""
    name = frame.filename
    if name.startswith(_OURS[0]) or name in (_OURS[1], "<frozen runpy>"):
        return None
    if os.path.abspath(name) != program:
        return frame
    where = _cell_line(frame.lineno, spans)
    if where is None:
        return None
    return traceback.FrameSummary(
        where[0], where[1], frame.name, lookup_line=False, line=frame.line
    )


def _cell_line(line: int | None, spans: list[tuple[int, int, int, int]]) -> tuple[str, int] | None:
    """("cell [N]", line in that cell) of a program line that came from a notebook cell."""
    for first, count, cell, cell_line in spans:
        if line is not None and first <= line < first + count:
            return f"cell [{cell}]", cell_line + line - first
    return None


def name_cells_in_warnings(program: str) -> None:
    """A warning raised by notebook code names its cell and line, as a traceback does."""
    spans = _line_map(program)
    plain = warnings.formatwarning

    def formatwarning(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        where = _cell_line(lineno, spans) if os.path.abspath(filename) == program else None
        if where is None:
            return plain(message, category, filename, lineno, line)
        text = linecache.getline(filename, lineno) if line is None else line
        return plain(message, category, where[0], where[1], text)

    warnings.formatwarning = formatwarning


def _frames(
    frames: Iterable[traceback.FrameSummary], program: str, spans: list[tuple[int, int, int, int]]
) -> list[traceback.FrameSummary]:
    return [f for f in (_to_notebook(x, program, spans) for x in frames) if f is not None]


def notebook_frames(
    frames: Iterable[traceback.FrameSummary], program: str
) -> list[traceback.FrameSummary]:
    """``frames`` (a stack, outermost first) as a notebook traceback shows them: a program
    line as ``cell [N]``, line M; the product's own frames left out."""
    return _frames(frames, program, _line_map(program))


def notebook_traceback(exc: BaseException, program: str) -> list[str]:
    """The traceback of ``exc`` with frames pointing at notebook cells, as lines."""
    spans = _line_map(program)
    top = traceback.TracebackException.from_exception(exc)
    todo, seen = [top], set()
    while todo:
        te = todo.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list(_frames(te.stack, program, spans))
        todo += [t for t in (te.__cause__, te.__context__) if t is not None]
        todo += list(getattr(te, "exceptions", None) or [])
    return list(top.format())
