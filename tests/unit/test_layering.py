"""The Kubernetes backend is reached through the backend registry only: no front end (the
magic, ``ktrain render``, YAML specs), view or other backend imports from
``jupyter_ktrain/backends/kubernetes/``, so each can change without the others."""

from __future__ import annotations

import ast
from pathlib import Path

import jupyter_ktrain

PACKAGE = Path(jupyter_ktrain.__file__).resolve().parent
KUBERNETES = "jupyter_ktrain.backends.kubernetes"
ALLOWED = ("backends/kubernetes/", "backends/registry.py")  # the backend and the registry


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every module ``source`` (the module ``module``) imports, relative imports resolved; for
    ``from X import name`` both ``X`` and ``X.name`` (a name may be a submodule)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def kubernetes_imports(path: Path) -> set[str]:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if is_package else parts)
    names = imported_modules(path.read_text(), module, is_package)
    return {n for n in names if n == KUBERNETES or n.startswith(KUBERNETES + ".")}


def test_only_the_backend_and_the_registry_import_the_kubernetes_backend() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(ALLOWED):
            continue
        found = kubernetes_imports(path)
        if found:
            offenders[rel] = sorted(found)
    assert offenders == {}, (
        f"import the Kubernetes backend through jupyter_ktrain.backends.registry: {offenders}"
    )


def test_the_check_sees_relative_lazy_and_absolute_imports() -> None:
    source = (
        "def f():\n"
        "    from ..backends.kubernetes.rdma import resolve_profile\n"
        "from ..backends import kubernetes\n"
        "import jupyter_ktrain.backends.kubernetes.api\n"
        "from .. import backends\n"
    )
    found = imported_modules(source, "jupyter_ktrain.server.core", is_package=False)
    assert {
        "jupyter_ktrain.backends.kubernetes.rdma",
        "jupyter_ktrain.backends.kubernetes",
        "jupyter_ktrain.backends.kubernetes.api",
        "jupyter_ktrain.backends",
    } <= found
    registry = imported_modules(
        "from .kubernetes.backend import X\n", "jupyter_ktrain.backends", True
    )
    assert "jupyter_ktrain.backends.kubernetes.backend" in registry
