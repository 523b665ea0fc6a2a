"""The cell in the program: ``run_cell``, which the program the kernel writes calls last.

The program (:mod:`jupyter_ktrain.capture.cell_program`) ends with ``run_cell(_KTRAIN_CELL,
globals())``: the ``%%ktrain`` cell runs in the program's globals, and on rank 0 the names it
binds come back to the notebook as one ``result`` record. Standard library only.
"""

from __future__ import annotations

import ast
import base64
import linecache
import pickle
import sys
from typing import Any

from .protocol import Result
from .ranks import global_rank

__all__ = ["MAX_RESULT_BYTES", "run_cell"]

MAX_RESULT_BYTES = 8 * 1024 * 1024


def _split_last_expression(cell: str) -> tuple[ast.Module, ast.Expression | None]:
    tree = ast.parse(cell)
    tail = tree.body[-1] if tree.body else None
    if isinstance(tail, ast.Expr):
        tree.body.pop()
        return tree, ast.Expression(tail.value)
    return tree, None


def run_cell(cell: str, namespace: dict[str, Any]) -> Any:
    """Execute the ``%%ktrain`` cell in the program's globals; rank 0 reports its results.

    The results are the names the cell binds at top level, plus ``_`` for a trailing
    expression, pickled for the notebook. A name whose value cannot be pickled is skipped with
    a warning; it never fails the job.
    """
    body, last = _split_last_expression(cell)
    filename = str(namespace.get("_KTRAIN_CELL_NAME", "<%%ktrain cell>"))
    linecache.cache[filename] = (len(cell), None, cell.splitlines(keepends=True), filename)
    exec(compile(body, filename, "exec"), namespace)
    value = eval(compile(last, filename, "eval"), namespace) if last else None
    if (global_rank() or 0) != 0:  # a program run by hand is rank 0
        return value
    names = namespace.get("_KTRAIN_RESULT_NAMES", [])
    results = {n: namespace[n] for n in names if n in namespace}
    if last is not None:
        results["_"] = value
    _emit_results(results)
    return value


def _emit_results(results: dict[str, Any]) -> None:
    payload: dict[str, bytes] = {}
    for name, value in results.items():
        try:
            payload[name] = pickle.dumps(value, protocol=4)
        except Exception as exc:  # the job still succeeded: say what did not come back
            print(f"jupyter-ktrain: result {name!r} cannot be sent back ({exc}); skipped.")
    if sum(len(v) for v in payload.values()) > MAX_RESULT_BYTES:
        print("jupyter-ktrain: results are over 8 MiB; save them to storage instead. Skipped.")
        return
    encoded = {k: base64.b64encode(v).decode("ascii") for k, v in payload.items()}
    sys.stdout.flush()
    print(Result(encoded).format(), flush=True)
