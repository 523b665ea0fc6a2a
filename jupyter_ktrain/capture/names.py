"""Which global names a piece of source reads, and which it binds. Pure, from ``symtable``."""

from __future__ import annotations

import ast
import symtable
from dataclasses import dataclass

__all__ = ["NameUse", "bound_names", "name_use", "top_level_binders"]


@dataclass(frozen=True)
class NameUse:
    """Globals read by a snippet: ``at_definition`` when the snippet runs (decorators,
    defaults, annotations, base classes, class bodies, top-level statements) and ``at_call``
    only when a function it defines is called. ``binds`` are the names the snippet defines."""

    at_definition: frozenset[str]
    at_call: frozenset[str]
    binds: frozenset[str]

    @property
    def all(self) -> frozenset[str]:
        return self.at_definition | self.at_call


def _collect(table: symtable.SymbolTable, runs_now: bool, now: set[str], later: set[str]) -> None:
    for sym in table.get_symbols():
        if sym.is_referenced() and (sym.is_global() or sym.is_declared_global()):
            (now if runs_now else later).add(sym.get_name())
    for child in table.get_children():
        # A class body runs when its enclosing code runs; a function body only when called.
        child_now = runs_now and str(child.get_type()) == "class"
        _collect(child, child_now, now, later)


def name_use(source: str, filename: str = "<cell>") -> NameUse:
    """Global names ``source`` reads, split by when they are needed."""
    top = symtable.symtable(source, filename, "exec")
    binds = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    now: set[str] = set()
    later: set[str] = set()
    for sym in top.get_symbols():
        if sym.is_referenced() and sym.get_name() not in binds:
            now.add(sym.get_name())
    for child in top.get_children():
        _collect(child, str(child.get_type()) == "class", now, later)
    # A name the snippet binds itself (recursion, a class used by its own methods) is not needed
    # from outside; a name read before the snippet binds it at top level still is.
    return NameUse(
        at_definition=frozenset(now - binds) | frozenset(_read_before_bound(source) & binds),
        at_call=frozenset(later - binds - now),
        binds=frozenset(binds),
    )


def _read_before_bound(source: str) -> set[str]:
    """Top-level names read by a statement before any earlier statement bound them
    (``x = x + 1`` needs the notebook's ``x``; ``for i in ...: print(i)`` does not)."""
    early: set[str] = set()
    _scan(ast.parse(source).body, set(), early)
    return early


def _loads(node: ast.AST | None, bound: set[str], early: set[str]) -> None:
    if node is None:
        return
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in bound:
            early.add(sub.id)


def _scan(stmts: list[ast.stmt], bound: set[str], early: set[str]) -> None:
    """Walk statements in execution order: a compound statement binds its header names
    (loop targets, ``with ... as``, ``except ... as``) before its body runs."""
    for stmt in stmts:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(stmt.name)
        elif isinstance(stmt, ast.For | ast.AsyncFor):
            _loads(stmt.iter, bound, early)
            bound |= _target_names(stmt.target)
            _scan(stmt.body + stmt.orelse, bound, early)
        elif isinstance(stmt, ast.While | ast.If):
            _loads(stmt.test, bound, early)
            _scan(stmt.body + stmt.orelse, bound, early)
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            for item in stmt.items:
                _loads(item.context_expr, bound, early)
                if item.optional_vars is not None:
                    bound |= _target_names(item.optional_vars)
            _scan(stmt.body, bound, early)
        elif isinstance(stmt, ast.Try):
            _scan(stmt.body, bound, early)
            for handler in stmt.handlers:
                _loads(handler.type, bound, early)
                if handler.name:
                    bound.add(handler.name)
                _scan(handler.body, bound, early)
            _scan(stmt.orelse + stmt.finalbody, bound, early)
        else:
            _loads(stmt, bound, early)
            bound |= _stmt_binds(stmt)


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _stmt_binds(stmt: ast.stmt) -> set[str]:
    names: set[str] = set()
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        for alias in stmt.names:
            names.add(alias.asname or alias.name.split(".")[0])
        return names
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def bound_names(source: str) -> list[str]:
    """Names the top level of ``source`` binds, in order of first binding."""
    seen: dict[str, None] = {}
    for stmt in ast.parse(source).body:
        for name in sorted(_stmt_binds(stmt)):
            seen.setdefault(name, None)
    return list(seen)


def top_level_binders(source: str, name: str) -> list[ast.stmt]:
    """Top-level statements of ``source`` that bind ``name``, in order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [stmt for stmt in tree.body if name in _stmt_binds(stmt)]
