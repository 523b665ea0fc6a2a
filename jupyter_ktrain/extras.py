"""What each optional part of jupyter-ktrain needs beyond ``pip install jupyter-ktrain``, and
the one error that says what is missing and the ``pip install`` that adds it, before anything is
created. The base install captures, renders nothing and runs nothing: every front end and
backend that needs more asks here first (:func:`require`, :func:`require_torch`).

Pure apart from the import system's look-ups (``importlib.util.find_spec``: nothing imported)
and, for another interpreter than this one, one short ``python -c`` that does the same there.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from dataclasses import dataclass

from .errors import MissingPackage

__all__ = ["EXTRAS", "Extra", "missing_modules", "require", "require_torch", "torch_missing"]


@dataclass(frozen=True)
class Extra:
    """An extra of the package (``pip install 'jupyter-ktrain[NAME]'``): the modules it brings
    that the code imports, and what it is for, as a sentence's object."""

    name: str
    modules: tuple[str, ...]
    gives: str

    @property
    def install(self) -> str:
        return f"pip install 'jupyter-ktrain[{self.name}]'"


EXTRAS = {
    e.name: e
    for e in (
        Extra(
            "kubernetes",
            ("kubernetes", "jsonschema", "kubernetes_validate", "httpx"),
            "a cluster (--backend kubernetes, `ktrain render`, a cluster's --dry-run)",
        ),
        Extra("notebook", ("ipywidgets", "anywidget"), "the cell's live widget"),
        Extra("sweep", ("optuna",), "a sweep (--sweep, ktrain.sweep)"),
        Extra("mlflow", ("mlflow",), "tracking in MLflow (--mlflow)"),
    )
}


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` this Python cannot import (found by name, none imported)."""
    out = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken parent package, or a module without spec
            found = False
        if not found:
            out.append(module)
    return out


def require(name: str, what: str = "", otherwise: str = "") -> None:
    """Raise :class:`MissingPackage` when extra ``name`` is not (wholly) installed here;
    ``what`` says what the user asked for, when more precise than the extra's own words;
    ``otherwise`` the other way out (``run with --mlflow off``)."""
    extra = EXTRAS[name]
    gone = missing_modules(extra.modules)
    if gone:
        raise MissingPackage(
            f"{what or extra.gives[:1].upper() + extra.gives[1:]} needs the {name!r} extra of "
            f"jupyter-ktrain, and this Python lacks {', '.join(gone)}: `{extra.install}` in "
            "the environment this kernel (or command) runs in"
            + (f", or {otherwise}." if otherwise else ", then run it again.")
        )


def torch_missing(python: str) -> bool:
    """Whether interpreter ``python`` cannot import torch (this one: looked up in process)."""
    if python == sys.executable:
        return bool(missing_modules(("torch",)))
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    try:
        done = subprocess.run([python, "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return done.returncode != 0


def require_torch(python: str, what: str) -> None:
    """Raise :class:`MissingPackage` when ``python`` (the interpreter the job's nodes run) has
    no torch: ``what`` (``torchrun``) comes with PyTorch, which is not an extra of ours (the
    build a machine needs, CPU or CUDA, is the user's choice)."""
    if torch_missing(python):
        raise MissingPackage(
            f"The local backend starts this job with {what}, which comes with PyTorch, and torch "
            f"is not installed in the Python the job runs ({python}): `pip install torch` there "
            "(or the build for your machine's CUDA, from PyTorch's install page), or run it on "
            "a cluster with --backend kubernetes."
        )
