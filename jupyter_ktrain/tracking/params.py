"""What a job was run with, as flat ``name -> text`` params: its flags and captured constants.

``flags`` are the ``%%ktrain`` values given (``nodes``, ``resources.gpus``, ...) plus the shape
every job has (backend, kind, nodes, processes per node); ``const.NAME`` are the module-level
constants of the captured program (``LR = 3e-4``, ``LAYERS = [64, 64]``: any literal), which is
what a notebook user changes between runs. Pure: no I/O.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..spec.job import JobSpec

__all__ = ["MAX_PARAM_CHARS", "code_hash", "constants", "flat", "job_params"]

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param's value


def flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"resources": {"gpus": 8}}`` -> ``{"resources.gpus": "8"}``; lists as text."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, name + "."))
        elif value is not None:
            out[name] = _text(value)
    return out


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = [list(v) if isinstance(v, tuple) else v for v in value]
    text = str(value)
    return text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."


def constants(source: str) -> dict[str, str]:
    """The program's module-level ``NAME = literal`` assignments, as ``const.NAME`` params
    (the last one of a name wins; names starting with ``_`` are skipped)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        for target in targets:
            if isinstance(target, ast.Name) and not target.id.startswith("_"):
                out[f"const.{target.id}"] = _text(literal)
    return out


def code_hash(files: Mapping[str, bytes]) -> str:
    """The sha256 of the shipped code: every file's name and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + len(files[name]).to_bytes(8, "big") + files[name])
    return h.hexdigest()


def job_params(spec: JobSpec, given: Mapping[str, Any], source: str) -> dict[str, str]:
    """Every param of a job: its shape, the flags given (their values, flattened), and the
    program's constants."""
    out = {
        "backend": spec.backend,
        "kind": spec.kind,
        "nodes": str(spec.nodes),
        "procs_per_node": str(spec.nproc),
    }
    out.update(flat({k: v for k, v in given.items() if k not in ("mlflow", "experiment")}))
    out.update(constants(source))
    return out
