"""What a run captures: the code to run and the namespace its names live in.

A :class:`Source` is a cell's text over a namespace: the ``%%ktrain`` cell over the kernel's
globals (:func:`cell_source`), or a call written out for a function object
(:func:`call_source`: ``ktrain.run(train, args=(3,), kwargs={"lr": 2e-5})`` is the cell
``train(3, lr=2e-05)`` over ``train``'s own globals). One capture serves both, so a function
passed to ``ktrain.run`` takes its helpers, globals, classes, imports and local modules along
as the cell does, and a secret in them is refused the same way.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..capture import CapturedProgram, capture
from ..errors import CaptureError, SpecError
from .front import ipython_shell

__all__ = ["Source", "call_source", "cell_source"]

ARG = "_ktrain_arg"  # names the call's arguments that are not plain literals bind to


@dataclass(frozen=True)
class Source:
    """``cell``: the code the job runs; ``namespace``: where its names are found (the
    kernel's globals); ``history``: the notebook's cells by execution count (IPython's
    ``In``), where definitions are looked up; ``hidden``: names IPython itself defined;
    ``cell_number``: the cell's own execution count, for tracebacks (``cell [4]``)."""

    cell: str
    namespace: Mapping[str, Any]
    history: Sequence[str] = ()
    hidden: Collection[str] = ()
    cell_number: int | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def capture(
        self, allow_secrets: Collection[str], by_reference: Collection[str]
    ) -> CapturedProgram:
        """The program (raises :class:`CaptureError`/:class:`SecretError` before anything
        is made)."""
        if not self.cell.strip():
            raise SpecError(
                "The cell has no code under its %%ktrain line: put the call to run there, e.g. "
                "`result = train()` on the next line (`%%ktrain --help` lists the flags)."
            )
        return capture(
            self.cell,
            self.namespace,
            self.history,
            self.hidden,
            allow_secrets=allow_secrets,
            from_env=by_reference,
            cell_number=self.cell_number,
        )

    def values_of(self, names: Collection[str]) -> dict[str, str]:
        """``--env NAME``: the kernel's environment variable, else the notebook's string
        global of that name."""
        out = {}
        for name in names:
            value = self.environ.get(name, self.namespace.get(name))
            if not isinstance(value, str):
                raise SpecError(
                    f"--env {name} passes the kernel's value, but the kernel has no environment "
                    f"variable {name} and the notebook no string named {name}. Set it first, "
                    f"e.g. `%set_env {name}=...` or `import os; os.environ[{name!r}] = ...`."
                )
            out[name] = value
        return out


def cell_source(cell: str, shell: Any) -> Source:
    """A ``%%ktrain`` cell's body in IPython ``shell`` (None: an empty namespace)."""
    if shell is None:
        return Source(cell, {})
    history = shell.user_ns.get("In", [])
    return Source(
        cell,
        shell.user_ns,
        history,
        getattr(shell, "user_ns_hidden", {}),
        cell_number=len(history) - 1 if len(history) > 1 else None,  # In[-1] is this cell
    )


def call_source(
    func: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    by_name: Sequence[str] = (),
) -> Source:
    """``func(*args, **kwargs)`` as a cell over ``func``'s globals: plain literal arguments
    written into the call, the others bound to names the capture ships like any value. In a
    notebook the kernel's history finds the definitions; in a script, the script itself.
    ``by_name``: keyword arguments passed by the variable of their name (``lr=lr``), bound
    later over the namespace (a sweep's names, per trial)."""
    if not callable(func):
        raise SpecError(
            f"ktrain.run takes the function to run first, got {type(func).__name__}: "
            f"ktrain.run(train, args=(...), kwargs={{...}})."
        )
    kwargs = dict(kwargs or {})
    for key in kwargs:
        if not isinstance(key, str) or not key.isidentifier():
            raise SpecError(f"kwargs key {key!r} is not a Python name: pass names only.")
    target = inspect.unwrap(func) if not isinstance(func, types.FunctionType) else func
    module_globals = getattr(target, "__globals__", None)
    namespace: dict[str, Any] = dict(module_globals) if isinstance(module_globals, dict) else {}
    name = getattr(func, "__name__", None)
    if not isinstance(name, str) or not name.isidentifier() or namespace.get(name) is not func:
        name = f"{ARG}_func"  # a value, not a name of its module: it travels as a value
    namespace[name] = func
    parts = [_argument(f"{ARG}{i}", value, namespace) for i, value in enumerate(args)]
    parts += [f"{key}={_argument(f'{ARG}_{key}', v, namespace)}" for key, v in kwargs.items()]
    parts += [f"{key}={key}" for key in by_name if key not in kwargs]
    cell = f"{name}({', '.join(parts)})\n"
    return Source(cell, namespace, *_history(func))


def _argument(name: str, value: Any, namespace: dict[str, Any]) -> str:
    """The argument as written in the call: its literal when it reads back equal (``3``,
    ``'adam'``, ``[64, 64]``), else a name bound to it in the namespace."""
    text = repr(value)
    try:
        if type(value) in (int, float, str, bool, type(None), list, tuple, dict) and (
            ast.literal_eval(text) == value
        ):
            return text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    namespace[name] = value
    return name


def _history(func: Callable[..., Any]) -> tuple[Sequence[str], Collection[str]]:
    """Where the definitions are read: the kernel's cells when ``func`` was defined in one,
    else the script it was defined in (a class with no method of its own is found there)."""
    shell = ipython_shell()
    if shell is not None and getattr(func, "__module__", None) == "__main__":
        return shell.user_ns.get("In", []), getattr(shell, "user_ns_hidden", {})
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if getattr(func, "__module__", None) == "__main__" and isinstance(path, str):
        try:
            with open(path, encoding="utf-8") as f:
                return ["", f.read()], ()
        except OSError as exc:
            raise CaptureError(
                f"Cannot read {os.path.basename(path)}, where {func.__name__!r} is defined "
                f"({exc}): its source travels with the job."
            ) from None
    return [], ()
