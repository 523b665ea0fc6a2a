"""The captured program's text (:mod:`.cell_program` captures, this writes): the notebook's
definitions in an order that runs, the values that are not literals in one pickle stream, the
cell, and the map of the program's lines back to the notebook cells they came from.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .encode import LOAD_NEXT, encode_together
from .locate import cell_label

__all__ = ["NOT_PICKLED", "Item", "emit", "ordered", "stream_values"]

NOT_PICKLED = object()


@dataclass
class Item:
    """One statement of the program: what it binds, its code, where it came from (its
    notebook order and cell) and the names it needs when it runs and later."""

    name: str
    code: str
    order: tuple[int, int]
    needs_now: frozenset[str] = frozenset()
    cell: int | None = None
    needs_later: frozenset[str] = frozenset()
    fallback: str | None = None  # the defining statement, when it is a plain literal
    verbatim: bool = False  # ``code`` is the notebook's own text (its lines map to the cell)
    pickled: Any = NOT_PICKLED  # the value, when it travels in the program's pickle stream
    literal: bool = False  # written as a literal unless other values are pickled


def _definition_needs(items: dict[str, Item]) -> dict[str, set[str]]:
    """What must exist before each item runs: its definition-time names, plus everything a
    function it calls while being defined (a decorator, a default) reads when called."""
    out: dict[str, set[str]] = {}
    for name, item in items.items():
        needs, todo = set(item.needs_now), list(item.needs_now)
        while todo:
            dep = items.get(todo.pop())
            if dep is None:
                continue
            for later in (dep.needs_later | dep.needs_now) - needs:
                needs.add(later)
                todo.append(later)
        out[name] = needs - {name}
    return out


def ordered(items: list[Item]) -> list[Item]:
    """Notebook order, moved only where something must exist before another runs.

    A cycle comes from mutable notebook state (a registry a decorator fills): the value is
    then re-created from its literal defining statement, and the definitions refill it.
    """
    by_name = {i.name: i for i in items}
    needs = _definition_needs(by_name)
    pending = sorted(items, key=lambda i: i.order)
    done: set[str] = set()
    out: list[Item] = []
    while pending:
        ready = next(
            (i for i in pending if needs[i.name] <= done | (needs[i.name] - set(by_name))), None
        )
        if ready is None:
            ready = next((i for i in pending if i.fallback), pending[0])
            if ready.fallback:
                ready = Item(ready.name, ready.fallback, ready.order, cell=ready.cell)
            pending = [i for i in pending if i.name != ready.name]
        else:
            pending.remove(ready)
        out.append(ready)
        done.add(ready.name)
    return out


_PRELUDE = """\
import base64 as _ktrain_base64
import io as _ktrain_io
import pickle as _ktrain_pickle

# The notebook's values that are not plain literals: one pickle stream (protocol 4) written
# by jupyter-ktrain in this program's order, read one value at a time below, so an object
# shared by several names (a model and its optimizer) arrives as one object.
_KTRAIN_VALUES = _ktrain_pickle.Unpickler(_ktrain_io.BytesIO(_ktrain_base64.b64decode(
    "{data}"
)))
"""


def stream_values(
    items: list[Item], is_main: Callable[[Any], str | None]
) -> tuple[list[Item], bytes]:
    """Pickle the values that need it into one stream, in the order the program loads them:
    the items (a streamed value's code loads it from the stream) and the stream (empty when
    every value stays a readable literal)."""
    if all(i.pickled is NOT_PICKLED or i.literal for i in items):
        return items, b""  # nothing needs pickling: every value stays a readable literal
    # a mutable literal (a list) may also be inside a pickled value: it goes in the stream too
    streamed = [i for i in items if i.pickled is not NOT_PICKLED]
    values = encode_together([i.pickled for i in streamed], is_main)
    names = {i.name for i in streamed}
    loads = [replace(i, code=f"{i.name} = {LOAD_NEXT}\n") if i.name in names else i for i in items]
    return loads, values


_EPILOGUE = """\
if __name__ == "__main__":
    try:
        from jupyter_ktrain.pod.cell import run_cell
    except ImportError:  # run by hand without jupyter-ktrain: just execute the cell
        def run_cell(cell, namespace):
            exec(compile(cell, _KTRAIN_CELL_NAME, "exec"), namespace)
    run_cell(_KTRAIN_CELL, globals())
"""


def emit(
    items: list[Item], values: bytes, cell: str, result_names: list[str], cell_name: str
) -> str:
    """The program's text. ``_KTRAIN_LINES`` maps its lines back to the notebook cells they
    came from, (first line, line count, cell, first line in that cell) per definition, so a
    traceback from the job can point at the cell (see :mod:`jupyter_ktrain.pod.tracebacks`)."""
    cells = sorted({i.cell for i in items if i.cell})
    head = ", ".join(f"[{c}]" for c in cells) or "none"
    parts: list[tuple[str, Item | None]] = [
        (
            f"# Generated by jupyter-ktrain from notebook cells {head}; edit the notebook, not "
            "this.\n# Runs as-is: `python program.py`, or `torchrun ... program.py` for several "
            "processes.\n",
            None,
        )
    ]
    if values:
        data = base64.b64encode(values).decode("ascii")
        parts.append((_PRELUDE.replace("{data}", data), None))
    imports = [i.code for i in items if i.order[0] == -1]
    if imports:
        parts.append(("\n".join(dict.fromkeys(imports)) + "\n", None))
    seen: set[str] = set()
    for item in items:
        if item.order[0] == -1 or item.code in seen:  # one statement may bind several names
            continue
        seen.add(item.code)
        label = f"# {cell_label(item.cell)}\n" if item.cell else ""
        parts.append((f"{label}{item.code.rstrip()}\n", item))
    lines: list[tuple[int, int, int, int]] = []
    at = 1
    for text, src in parts:
        count = text.rstrip("\n").count("\n") + 1
        if src is not None and src.cell and src.verbatim:
            skip = 1 if text.startswith("# ") else 0
            lines.append((at + skip, count - skip, src.cell, src.order[1]))
        at += count + 2  # parts are separated by two blank lines
    tail = [
        f"_KTRAIN_CELL = {cell!r}\n_KTRAIN_CELL_NAME = {cell_name!r}\n"
        f"_KTRAIN_RESULT_NAMES = {result_names!r}\n_KTRAIN_LINES = {tuple(lines)!r}\n",
        _EPILOGUE,
    ]
    texts = [text for text, _ in parts] + tail
    return "\n\n".join(p.rstrip("\n") + "\n" for p in texts)
