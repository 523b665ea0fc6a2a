"""Turn a ``%%ktrain`` cell plus the kernel's namespace into one self-contained program.

The program is Python source, not a pickle of functions: the job's Python may differ from the
kernel's. It holds, in an order that runs: the imports the code needs, the source of every
function, class and lambda the notebook defined that the cell reaches (transitively, the live
definition of each), notebook values as literals or base64 pickles of plain data, and the cell
itself as a string literal. It is written to a file and never passes through a shell.
"""

from __future__ import annotations

import builtins
import importlib
import types
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CaptureError
from .locate import cell_label, locate, locate_assignment
from .names import bound_names, name_use
from .requirements import Requirements
from .values import EncodeFailure, encode_value

__all__ = ["CapturedProgram", "capture"]


@dataclass(frozen=True)
class CapturedProgram:
    """The job's code. ``files`` maps file names in the code directory to their bytes."""

    source: str
    cell: str
    result_names: tuple[str, ...]
    requirements: tuple[str, ...]
    cells: tuple[int, ...]
    entry: str
    warnings: tuple[str, ...] = ()
    local_files: tuple[tuple[str, bytes], ...] = ()

    @property
    def files(self) -> dict[str, bytes]:
        out = {"program.py": self.source.encode("utf-8")}
        if self.requirements:
            out["requirements.txt"] = ("\n".join(self.requirements) + "\n").encode()
        out.update(dict(self.local_files))
        return out


@dataclass
class _Item:
    name: str
    code: str
    order: tuple[int, int]
    needs_now: frozenset[str] = frozenset()
    cell: int | None = None
    needs_later: frozenset[str] = frozenset()
    fallback: str | None = None  # the defining statement, when it is a plain literal


@dataclass
class _Capture:
    namespace: Mapping[str, Any]
    history: Sequence[str]
    hidden: Collection[str]
    items: dict[str, _Item] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    requirements: Requirements = field(default_factory=Requirements)
    uses_pickle: bool = False

    def is_main(self, obj: Any) -> str | None:
        if not isinstance(obj, type | types.FunctionType):
            return None
        if getattr(obj, "__module__", None) != "__main__":
            self.requirements.add_module(getattr(obj, "__module__", None))
            return None
        name = obj.__name__
        return name if self.namespace.get(name) is obj else None

    # -- resolution -----------------------------------------------------------------------
    def need(self, names: Collection[str], who: str) -> None:
        for name in sorted(names):
            if name in self.items or name in self.skipped:
                continue
            self.resolve(name, who)

    def resolve(self, name: str, who: str) -> None:
        ns = self.namespace
        if name not in ns or name in self.hidden:
            self.skipped.add(name)
            if name in self.hidden and name not in dir(builtins):
                self.warnings.append(
                    f"{who} uses {name!r}, which belongs to IPython and does not exist in the job."
                )
            elif name not in ns and not hasattr(builtins, name):
                self.warnings.append(f"{who} uses {name!r}, which the notebook has not defined.")
            return
        obj = ns[name]
        if hasattr(builtins, name) and getattr(builtins, name) is obj:
            self.skipped.add(name)
            return
        if isinstance(obj, types.ModuleType):
            self.items[name] = self.module_item(name, obj)
        elif self.is_notebook_code(obj):
            self.source_item(name, obj)
        else:
            self.items[name] = self.import_item(name, obj) or self.value_item(name, obj)

    @staticmethod
    def is_notebook_code(obj: Any) -> bool:
        return isinstance(obj, type | types.FunctionType) and obj.__module__ == "__main__"

    def module_item(self, name: str, module: types.ModuleType) -> _Item:
        if module.__name__ == "__main__" or getattr(module, "__spec__", None) is None:
            raise CaptureError(
                f"{name!r} is a module that cannot be imported by name in the job. "
                f"Import a real module instead."
            )
        self.requirements.add_module(module.__name__)
        real = module.__name__
        line = f"import {real}" if name == real else f"import {real} as {name}"
        return _Item(name, line, (-1, 0))

    def import_item(self, name: str, obj: Any) -> _Item | None:
        """``from module import obj`` for classes/functions importable by their name."""
        module_name = getattr(obj, "__module__", None)
        qual = getattr(obj, "__qualname__", None)
        if not isinstance(module_name, str) or not isinstance(qual, str) or "." in qual:
            return None
        if module_name == "__main__" or "<" in qual:
            return None
        try:
            found = getattr(importlib.import_module(module_name), qual)
        except Exception:
            return None
        if found is not obj:
            return None
        self.requirements.add_module(module_name)
        alias = "" if qual == name else f" as {name}"
        return _Item(name, f"from {module_name} import {qual}{alias}", (-1, 0))

    def source_item(self, name: str, obj: Any) -> None:
        real = getattr(obj, "__name__", name)
        if "<locals>" in getattr(obj, "__qualname__", ""):
            where = locate_assignment(name, self.history)
            raise CaptureError(
                f"{name!r} (from {cell_label(where.cell if where else None)}) is a function "
                f"created inside another function (a closure), so its source cannot be sent "
                f"alone. Define it at the top level of a cell, or call the function that "
                f"creates it inside the %%ktrain cell."
            )
        if real not in ("<lambda>", name) and self.namespace.get(real) is obj:
            self.items[name] = _Item(name, f"{name} = {real}", (10**9, 0), frozenset({real}))
            self.need({real}, f"{name!r}")
            return
        located = locate(name, obj, self.history)
        use = name_use(located.source)
        self.items[name] = _Item(
            name,
            located.source,
            (located.cell or 0, located.line),
            use.at_definition,
            located.cell,
            use.at_call,
        )
        for also in use.binds - {name}:
            self.skipped.add(also)
        self.need(use.all, f"{name!r} ({cell_label(located.cell)})")

    def value_item(self, name: str, obj: Any) -> _Item:
        where = locate_assignment(name, self.history)
        cell = where.cell if where else None
        try:
            encoded = encode_value(obj, self.is_main)
        except EncodeFailure as exc:
            raise CaptureError(
                f"{name!r} ({type(obj).__module__}.{type(obj).__qualname__}, defined in "
                f"{cell_label(cell)}) cannot be sent to the job: {exc.reason}. "
                f"To fix: {exc.hint}."
            ) from None
        self.requirements.add_module(type(obj).__module__)
        self.uses_pickle |= encoded.expression.startswith("_ktrain_value(")
        item = _Item(
            name,
            f"{name} = {encoded.expression}\n",
            (cell or 0, where.line if where else 0),
            encoded.main_refs,
            cell,
            fallback=_literal_statement(where.source) if where else None,
        )
        self.need(encoded.main_refs, f"{name!r}")
        return item


def _literal_statement(source: str) -> str | None:
    """``source`` if it is ``NAME = <literal>`` (e.g. ``REGISTRY = {}``), else None."""
    import ast

    try:
        tree = ast.parse(source)
        stmt = tree.body[0]
        if len(tree.body) == 1 and isinstance(stmt, ast.Assign):
            ast.literal_eval(stmt.value)
            return source
    except (SyntaxError, ValueError, TypeError, IndexError):
        return None
    return None


def _definition_needs(items: dict[str, _Item]) -> dict[str, set[str]]:
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


def _ordered(items: list[_Item]) -> list[_Item]:
    """Notebook order, moved only where something must exist before another runs.

    A cycle comes from mutable notebook state (a registry a decorator fills): the value is
    then re-created from its literal defining statement, and the definitions refill it.
    """
    by_name = {i.name: i for i in items}
    needs = _definition_needs(by_name)
    pending = sorted(items, key=lambda i: i.order)
    done: set[str] = set()
    out: list[_Item] = []
    while pending:
        ready = next(
            (i for i in pending if needs[i.name] <= done | (needs[i.name] - set(by_name))), None
        )
        if ready is None:
            ready = next((i for i in pending if i.fallback), pending[0])
            if ready.fallback:
                ready = _Item(ready.name, ready.fallback, ready.order, cell=ready.cell)
            pending = [i for i in pending if i.name != ready.name]
        else:
            pending.remove(ready)
        out.append(ready)
        done.add(ready.name)
    return out


_PRELUDE = '''\
import base64 as _ktrain_base64
import pickle as _ktrain_pickle


def _ktrain_value(data):
    """A notebook value, pickled (protocol 4) and base64-encoded by jupyter-ktrain."""
    return _ktrain_pickle.loads(_ktrain_base64.b64decode(data))
'''

_EPILOGUE = """\
if __name__ == "__main__":
    try:
        from jupyter_ktrain.runtime import run_cell
    except ImportError:  # run by hand without jupyter-ktrain: just execute the cell
        def run_cell(cell, namespace):
            exec(compile(cell, "<%%ktrain cell>", "exec"), namespace)
    run_cell(_KTRAIN_CELL, globals())
"""


def _emit(ordered: list[_Item], cap: _Capture, cell: str, result_names: list[str]) -> str:
    cells = sorted({i.cell for i in ordered if i.cell})
    head = ", ".join(f"[{c}]" for c in cells) or "none"
    parts = [
        f"# Generated by jupyter-ktrain from notebook cells {head}; edit the notebook, not this.\n"
        "# Runs as-is: `python program.py`, or `torchrun ... program.py` for several processes.\n"
    ]
    if cap.uses_pickle:
        parts.append(_PRELUDE)
    imports = [i.code for i in ordered if i.order[0] == -1]
    if imports:
        parts.append("\n".join(dict.fromkeys(imports)) + "\n")
    seen: set[str] = set()
    for item in ordered:
        if item.order[0] == -1 or item.code in seen:  # one statement may bind several names
            continue
        seen.add(item.code)
        label = f"# {cell_label(item.cell)}\n" if item.cell else ""
        parts.append(f"{label}{item.code.rstrip()}\n")
    parts.append(f"_KTRAIN_CELL = {cell!r}\n_KTRAIN_RESULT_NAMES = {result_names!r}\n")
    parts.append(_EPILOGUE)
    return "\n\n".join(p.rstrip("\n") + "\n" for p in parts)


def _entry(cell: str) -> str:
    import ast

    for node in ast.walk(ast.parse(cell)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id
    return "ktrain"


def capture(
    cell: str,
    namespace: Mapping[str, Any],
    history: Sequence[str] = (),
    hidden: Collection[str] = (),
) -> CapturedProgram:
    """Capture what ``cell`` needs from ``namespace`` (the kernel's globals).

    ``history`` is the kernel's input history indexed by execution count (IPython's ``In``);
    ``hidden`` are names IPython itself put in the namespace. Raises :class:`CaptureError`
    naming the object, its cell and the fix when something cannot travel.
    """
    try:
        use = name_use(cell, "<%%ktrain cell>")
    except SyntaxError as exc:
        raise CaptureError(
            f"The %%ktrain cell is not valid Python (line {exc.lineno}: {exc.msg}). "
            f"Fix the cell body; flags go on the %%ktrain line."
        ) from None
    cap = _Capture(namespace, history, set(hidden))
    missing = [
        n for n in sorted(use.at_definition) if n not in namespace and not hasattr(builtins, n)
    ]
    if missing:
        raise CaptureError(
            f"The %%ktrain cell uses {', '.join(map(repr, missing))}, which the notebook has not "
            f"defined. Run the cell that defines it first."
        )
    cap.need(use.all, "the %%ktrain cell")
    ordered = _ordered(list(cap.items.values()))
    result_names = bound_names(cell)
    source = _emit(ordered, cap, cell, result_names)
    compile(source, "program.py", "exec")  # a bug here is ours: fail before shipping
    return CapturedProgram(
        source=source,
        cell=cell,
        result_names=tuple(result_names),
        requirements=tuple(cap.requirements.pins()),
        cells=tuple(sorted({i.cell for i in ordered if i.cell})),
        entry=_entry(cell),
        warnings=tuple(cap.warnings),
        local_files=tuple(sorted(cap.requirements.local_files().items())),
    )
