"""The pod package (``jupyter_ktrain/pod/``) imports only the standard library and itself.

Read from the source (every ``import`` of every module, wherever it stands), so a module that
no test imports is held to it too. Third-party libraries the job may have (NVML's bindings)
are only imported inside the functions that use them, and only those named here.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "jupyter_ktrain"
POD = ROOT / "pod"
LAZY_THIRD_PARTY = {"pynvml"}  # imported inside a function, where the job may have it


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[tuple[str, bool, bool, int]]:
    """(absolute module name, inside a function/class, under ``if TYPE_CHECKING``, line)."""
    package = _module_name(path)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]

    def walk(
        node: ast.AST, nested: bool, typing_only: bool
    ) -> Iterator[tuple[str, bool, bool, int]]:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
            )
            guarded = typing_only or (
                isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING"
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, nested, typing_only, child.lineno
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    names = (
                        [f"{base}.{child.module}"]
                        if child.module
                        else [f"{base}.{a.name}" for a in child.names]
                    )
                else:
                    names = [str(child.module)]
                for name in names:
                    yield name, nested, typing_only, child.lineno
            yield from walk(child, inner, guarded)

    yield from walk(ast.parse(path.read_text(), str(path)), False, False)


POD_FILES = sorted(POD.rglob("*.py"))


def test_the_pod_package_has_its_modules() -> None:
    names = {_module_name(p) for p in POD_FILES}
    for want in ("protocol", "ranks", "report", "runtime", "agent.runner", "agent.sampler"):
        assert f"jupyter_ktrain.pod.{want}" in names


@pytest.mark.parametrize("path", POD_FILES, ids=lambda p: p.relative_to(POD).as_posix())
def test_a_pod_module_imports_only_the_standard_library_and_the_pod_package(path: Path) -> None:
    for name, nested, _typing_only, line in _imports(path):
        where = f"{path.relative_to(ROOT.parent)}:{line} imports {name}"
        top = name.split(".")[0]
        if top == "jupyter_ktrain":
            assert name == "jupyter_ktrain.pod" or name.startswith("jupyter_ktrain.pod."), where
        elif top not in sys.stdlib_module_names and top != "__future__":
            assert top in LAZY_THIRD_PARTY, where
            assert nested, f"{where} at import time"


def test_the_package_init_imports_only_the_pod_side_eagerly() -> None:
    """``import jupyter_ktrain`` in a pod, where only the pod package travelled: the rest of
    the public API (JobSpec, the errors) comes on first use."""
    init = ROOT / "__init__.py"
    for name, nested, typing_only, line in _imports(init):
        top = name.split(".")[0]
        if nested or typing_only:
            continue
        if top == "jupyter_ktrain":
            assert name.startswith("jupyter_ktrain.pod."), f"__init__.py:{line} imports {name}"
        else:
            assert top in sys.stdlib_module_names or top == "__future__", name


def test_the_lazy_public_names_resolve() -> None:
    import jupyter_ktrain
    from jupyter_ktrain.errors import KtrainError
    from jupyter_ktrain.spec.job import JobSpec

    assert jupyter_ktrain.JobSpec is JobSpec
    assert jupyter_ktrain.KtrainError is KtrainError
    assert set(jupyter_ktrain.__all__) <= set(dir(jupyter_ktrain))
    with pytest.raises(AttributeError):
        jupyter_ktrain.no_such_name  # noqa: B018
