"""Turn a ``%%ktrain`` cell plus the kernel's namespace into one self-contained program.

The program is Python source, not a pickle of functions: the job's Python may differ from the
kernel's. It holds, in an order that runs: the imports the code needs, the source of every
function, class and lambda the notebook defined that the cell reaches (transitively, the live
definition of each), notebook values as literals or one pickle stream (shared objects stay
shared), and the cell itself as a string literal. It is written to a file and never passes
through a shell. Secrets are never written into it (:mod:`.secrets`). This module finds what
the cell needs; :mod:`.program_text` orders it and writes the text.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import types
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CaptureError, SecretError
from .encode import EncodeFailure, encode_value, too_big
from .locate import cell_label, locate, locate_assignment
from .names import bound_names, name_use
from .pins import Requirements
from .program_text import NOT_PICKLED, Item, emit, ordered, stream_values
from .secrets import (
    CELL,
    EnvSecrets,
    Finding,
    env_name,
    find_in_bytes,
    find_in_source,
    find_in_value,
    refusal,
    secret_at,
)

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
class _Capture:
    namespace: Mapping[str, Any]
    history: Sequence[str]
    hidden: Collection[str]
    items: dict[str, Item] = field(default_factory=dict)
    skipped: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    requirements: Requirements = field(default_factory=Requirements)
    allow_secrets: frozenset[str] = frozenset()
    from_env: frozenset[str] = frozenset()  # variables the job gets by --env/--secret-env
    by_id: dict[int, str] = field(default_factory=dict)  # value object -> its first name
    env: EnvSecrets = field(default_factory=EnvSecrets)  # the kernel's secret variables, now

    # -- secrets ----------------------------------------------------------------------------
    def check_secret(self, finding: Finding | None, owner: str, place: str) -> None:
        """Refuse a secret found in what ``owner`` ships, unless --allow-secret names it."""
        if finding is None:
            return
        key = owner  # what --allow-secret names: the global, or the name in the cell
        if owner == CELL:
            key = finding.name if finding.name != CELL else finding.env
        if {key, finding.name} & self.allow_secrets:
            self.warnings.append(
                f"--allow-secret {key}: {secret_at(finding, owner, place)} is written into the "
                f"job's code as it is; anyone who can read the code's ConfigMap, pull its code "
                f"image or open its job folder can read it."
            )
            return
        raise SecretError(refusal(finding, owner, place, key), name=key)

    def is_main(self, obj: Any) -> str | None:
        if not isinstance(obj, type | types.FunctionType) and not _wraps_code(obj):
            return None
        if getattr(obj, "__module__", None) != "__main__":
            self.requirements.add_module(getattr(obj, "__module__", None))
            return None
        name = getattr(obj, "__name__", None)
        return name if isinstance(name, str) and self.namespace.get(name) is obj else None

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
            if name in self.hidden and name not in dir(builtins) and name not in _SITE_BUILTINS:
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
        """A class or function the notebook defined, also behind a wrapper that keeps it in
        ``__wrapped__`` (``functools.lru_cache``/``cache``/``wraps``): it travels by source,
        decorators included, so the job re-applies them."""
        if isinstance(obj, type | types.FunctionType):
            return obj.__module__ == "__main__"
        return _wraps_code(obj) and getattr(obj, "__module__", None) == "__main__"

    def module_item(self, name: str, module: types.ModuleType) -> Item:
        if module.__name__ == "__main__" or getattr(module, "__spec__", None) is None:
            raise CaptureError(
                f"{name!r} is a module that cannot be imported by name in the job. "
                f"Import a real module instead."
            )
        self.requirements.add_module(module.__name__)
        real = module.__name__
        line = f"import {real}" if name == real else f"import {real} as {name}"
        return Item(name, line, (-1, 0))

    def import_item(self, name: str, obj: Any) -> Item | None:
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
        return Item(name, f"from {module_name} import {qual}{alias}", (-1, 0))

    def source_item(self, name: str, obj: Any) -> None:
        real = getattr(obj, "__name__", name)
        if "<locals>" in getattr(obj, "__qualname__", ""):
            if self.statement_item(name):
                return
            where = locate_assignment(name, self.history)
            raise CaptureError(
                f"{name!r} (from {cell_label(where.cell if where else None)}) is a function "
                f"created inside another function (a closure), so its source cannot be sent "
                f"alone. Define it at the top level of a cell, or call the function that "
                f"creates it inside the %%ktrain cell."
            )
        if real not in ("<lambda>", name) and self.namespace.get(real) is obj:
            self.items[name] = Item(name, f"{name} = {real}", (10**9, 0), frozenset({real}))
            self.need({real}, f"{name!r}")
            return
        located = locate(name, obj, self.history)
        found = find_in_source(located.source, name, self.env)
        self.check_secret(found, name, cell_label(located.cell))
        use = name_use(located.source)
        self.items[name] = Item(
            name,
            located.source,
            (located.cell or 0, located.line),
            use.at_definition,
            located.cell,
            use.at_call,
            verbatim=True,
        )
        for also in use.binds - {name}:
            self.skipped.add(also)
        self.need(use.all, f"{name!r} ({cell_label(located.cell)})")

    def statement_item(self, name: str) -> bool:
        """Send ``name`` as the assignment that made it (``scale = make(7)``, a dict holding a
        lambda, ``LambdaLR(optimizer, lr_lambda=...)``), re-run in the job from the names it
        reads, when a value cannot be pickled. False when there is no such statement."""
        where = locate_assignment(name, self.history)
        if where is None or not _is_assignment(where.source):
            return False
        use = name_use(where.source)
        if name in use.at_definition:  # ``x = f(x)`` needs the old x: not rebuildable
            return False
        found = find_in_source(where.source, name, self.env)
        self.check_secret(found, name, cell_label(where.cell))
        self.items[name] = Item(
            name,
            where.source,
            (where.cell or 0, where.line),
            use.at_definition,
            where.cell,
            use.at_call,
            verbatim=True,
        )
        self.skipped.update(use.binds - {name})
        self.need(use.all, f"{name!r} ({cell_label(where.cell)})")
        return True

    def value_item(self, name: str, obj: Any) -> Item:
        where = locate_assignment(name, self.history)
        cell = where.cell if where else None
        order = (cell or 0, where.line if where else 0)
        first = self.by_id.setdefault(id(obj), name)
        if first != name and not isinstance(obj, _IMMUTABLE):  # two names for one object
            return Item(name, f"{name} = {first}\n", order, frozenset({first}), cell)
        big = too_big(obj)  # before anything reads or copies a value that cannot travel
        if big:
            raise _cannot_send(name, obj, cell, big)
        finding = find_in_value(name, obj, self.env)
        env = _passed_env(name, finding, self.from_env)
        if isinstance(obj, str) and env:
            # the job gets this variable by reference (--secret-env/--env): read it there
            return Item(name, f"{name} = __import__('os').environ[{env!r}]\n", order, cell=cell)
        self.check_secret(finding, name, cell_label(cell))
        try:
            encoded = encode_value(obj, self.is_main)
        except EncodeFailure as exc:
            if exc.rebuildable and self.statement_item(name):
                return self.items.pop(name)
            raise _cannot_send(name, obj, cell, exc) from None
        shape = find_in_bytes(encoded.pickled, self.env)
        if shape:
            self.check_secret(Finding(name, name, f"{shape}, by its value"), name, cell_label(cell))
        self.requirements.add_module(type(obj).__module__)
        item = Item(
            name,
            f"{name} = {encoded.expression}\n",
            order,
            encoded.main_refs,
            cell,
            fallback=_literal_statement(where.source) if where else None,
            pickled=obj if encoded.pickled or not isinstance(obj, _IMMUTABLE) else NOT_PICKLED,
            literal=not encoded.pickled,
        )
        self.need(encoded.main_refs, f"{name!r}")
        return item


def _cannot_send(name: str, obj: Any, cell: int | None, exc: EncodeFailure) -> CaptureError:
    return CaptureError(
        f"{name!r} ({type(obj).__module__}.{type(obj).__qualname__}, defined in "
        f"{cell_label(cell)}) cannot be sent to the job: {exc.reason}. To fix: {exc.hint}."
    )


def _passed_env(name: str, finding: Finding | None, from_env: Collection[str]) -> str | None:
    """The variable, given to the job by --env/--secret-env, that a secret global ``name``
    is read from there: the one its value came from (``MY_SERVICE_CRED``) or its own name
    (``HF_TOKEN``); a global named like a passed variable also when no secret was found."""
    own = env_name(name)
    if finding is None:
        return name if name == own and name in from_env else None
    return next((e for e in (finding.env, own) if e in from_env), None)


_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset)
# names Python's ``site`` module puts in builtins: IPython hides them, the job has them
_SITE_BUILTINS = frozenset({"exit", "quit", "copyright", "credits", "license", "help"})


def _wraps_code(obj: Any) -> bool:
    """``obj`` wraps a notebook function (``lru_cache``, ``cache``, ``wraps``)."""
    try:
        inner = inspect.unwrap(obj) if hasattr(obj, "__wrapped__") else None
    except ValueError:  # a cycle of __wrapped__
        return False
    return isinstance(inner, types.FunctionType) and inner.__module__ == "__main__"


def _is_assignment(source: str) -> bool:
    import ast

    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return len(body) == 1 and isinstance(body[0], ast.Assign | ast.AnnAssign)


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
    *,
    allow_secrets: Collection[str] = (),
    from_env: Collection[str] = (),
    cell_number: int | None = None,
) -> CapturedProgram:
    """Capture what ``cell`` needs from ``namespace`` (the kernel's globals).

    ``history`` is the kernel's input history indexed by execution count (IPython's ``In``);
    ``hidden`` are names IPython itself put in the namespace. Raises :class:`CaptureError`
    naming the object, its cell and the fix when something cannot travel, and
    :class:`SecretError` when a secret would be written into the code (unless its name is in
    ``allow_secrets``). A secret string global whose variable is in ``from_env`` (the job gets
    it by ``--env``/``--secret-env``) is read from the job's environment instead.
    """
    try:
        use = name_use(cell, "<%%ktrain cell>")
    except SyntaxError as exc:
        raise CaptureError(
            f"The %%ktrain cell is not valid Python (line {exc.lineno}: {exc.msg}). "
            f"Fix the cell body; flags go on the %%ktrain line."
        ) from None
    cap = _Capture(
        namespace,
        history,
        set(hidden),
        allow_secrets=frozenset(allow_secrets),
        from_env=frozenset(from_env),
    )
    cap.check_secret(find_in_source(cell, CELL, cap.env), CELL, "this cell")
    missing = [
        n for n in sorted(use.at_definition) if n not in namespace and not hasattr(builtins, n)
    ]
    if missing:
        raise CaptureError(
            f"The %%ktrain cell uses {', '.join(map(repr, missing))}, which the notebook has not "
            f"defined. Run the cell that defines it first."
        )
    cap.need(use.all, "the %%ktrain cell")
    items, values = stream_values(ordered(list(cap.items.values())), cap.is_main)
    local_files = cap.requirements.local_files()
    for rel, data in sorted(local_files.items()):
        text = data.decode("utf-8", "replace")
        found = find_in_source(text, rel, cap.env) if rel.endswith(".py") else None
        shape = find_in_bytes(data, cap.env)
        if found is None and shape:
            found = Finding(rel, rel, f"{shape}, by its value")
        cap.check_secret(found, rel, "a local module next to the notebook")
    result_names = bound_names(cell)
    cell_name = f"cell [{cell_number}]" if cell_number else "<%%ktrain cell>"
    source = emit(items, values, cell, result_names, cell_name)
    compile(source, "program.py", "exec")  # a bug here is ours: fail before shipping
    return CapturedProgram(
        source=source,
        cell=cell,
        result_names=tuple(result_names),
        requirements=tuple(cap.requirements.pins()),
        cells=tuple(sorted({i.cell for i in items if i.cell})),
        entry=_entry(cell),
        warnings=tuple(cap.warnings),
        local_files=tuple(sorted(local_files.items())),
    )
