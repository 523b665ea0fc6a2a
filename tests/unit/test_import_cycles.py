"""No import circles in ``jupyter_ktrain/``: no module imports another that imports it back,
counting every import there is: at module level (in ``try``/``if`` blocks too), inside
functions and methods, and under ``if TYPE_CHECKING:``. An import moved into a function or
under ``TYPE_CHECKING`` still makes its module depend on the other one: it hides a circle, it
does not remove it. A circle makes import order matter and hides which layer is below which;
the fix is the shared piece moved down into a lower module, or the entry point moved above
what it wires."""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "jupyter_ktrain"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _under_type_checking(tree: ast.AST) -> set[int]:
    """The nodes in the body of an ``if TYPE_CHECKING:`` (its ``else`` runs)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def _edges(
    source: str, name: str, is_package: bool, files: Collection[str], *, type_checking: bool = True
) -> set[str]:
    """The package's modules that module ``name`` imports, wherever the import is written:
    module level, in ``try``/``if`` blocks, in functions and methods, and (unless
    ``type_checking`` is False) under ``if TYPE_CHECKING:``."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    skip = set() if type_checking else _under_type_checking(tree)
    edges: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.level and node.module else (
                base if node.level else node.module or "")  # fmt: skip
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        edges |= {t for t in targets if t in files and t != name}
    return edges


def _graph(*, type_checking: bool = True) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at every level (see :func:`_edges`)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        graph[name] = _edges(path.read_text(), name, is_package, files, type_checking=type_checking)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_circles() -> None:
    circles = _circles(_graph())
    assert not circles, "import circles (imports at every level):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_the_check_sees_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _graph()["jupyter_ktrain.backends.base"] >= {"jupyter_ktrain.jobs"}


SAMPLE = """
from __future__ import annotations
import typing
from typing import TYPE_CHECKING
from . import low
try:
    from .optional import thing
except ImportError:
    thing = None
if TYPE_CHECKING:
    from .typed import Shape
else:
    from .untyped import Plain

def run():
    from .in_function import go
    return go()

class Runner:
    def start(self):
        import pkg.in_method
"""


def test_the_circle_check_reads_imports_at_every_level() -> None:
    """An import inside a function or a method, or under ``if TYPE_CHECKING:``, is an edge of
    the graph as a module-level one is: moving an import there does not remove a circle."""
    files = ("pkg", "pkg.mod", "pkg.low", "pkg.optional", "pkg.typed", "pkg.untyped",
             "pkg.in_function", "pkg.in_method", "pkg.unused")  # fmt: skip
    every = _edges(SAMPLE, "pkg.mod", False, files)
    assert every == {"pkg.low", "pkg.optional", "pkg.typed", "pkg.untyped", "pkg.in_function",
                     "pkg.in_method"}  # fmt: skip
    assert _edges(SAMPLE, "pkg.mod", False, files, type_checking=False) == every - {"pkg.typed"}
    back = _edges("def f():\n    from . import a\n", "pkg.b", False, ("pkg.a", "pkg.b"))
    assert _circles({"pkg.a": {"pkg.b"}, "pkg.b": back}) == [["pkg.a", "pkg.b"]]


# -- the layers: the job vocabulary at the bottom, backends and the monitor side by side on it --
BOTTOM = ("jupyter_ktrain.jobs", "jupyter_ktrain.failures", "jupyter_ktrain.kinds")
POD = "jupyter_ktrain.pod"


def _imports(name: str) -> dict[str, set[str]]:
    """What module ``name`` imports from the package, every import (module level, in functions,
    under ``if TYPE_CHECKING:``), as {module: names taken from it}."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    path = files[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            module = (f"{base}.{node.module}" if node.module else base) if node.level else (
                node.module or "")  # fmt: skip
            found.setdefault(module, set()).update(a.name for a in node.names)
    return {m: n for m, n in found.items() if m.startswith("jupyter_ktrain")}


def _modules_under(prefix: str) -> list[str]:
    names = (_module_name(p) for p in PACKAGE.rglob("*.py"))
    return sorted(n for n in names if n == prefix or n.startswith(prefix + "."))


def _within(module: str, layers: tuple[str, ...]) -> bool:
    return any(module == layer or module.startswith(layer + ".") for layer in layers)


def test_the_job_vocabulary_is_the_bottom_layer() -> None:
    """``jobs`` (states, statuses, the view port), ``failures`` and ``kinds`` import nothing of
    the package but each other and the standard-library-only ``pod`` package, which imports
    nothing above it."""
    above = {
        name: sorted(m for m in _imports(name) if not _within(m, (*BOTTOM, POD)))
        for name in (*BOTTOM, *_modules_under(POD))
    }
    assert {k: v for k, v in above.items() if v} == {}
    pod_up = {
        n: sorted(m for m in _imports(n) if not _within(m, (POD,))) for n in _modules_under(POD)
    }
    assert {k: v for k, v in pod_up.items() if v} == {}


def test_backends_and_the_monitor_do_not_import_each_other() -> None:
    """The backends never import the monitor; the monitor takes from the backends only the
    job handle's type (``backends.base.Job``, under ``if TYPE_CHECKING:``), never code."""
    backends = {
        name: sorted(m for m in _imports(name) if _within(m, ("jupyter_ktrain.monitor",)))
        for name in _modules_under("jupyter_ktrain.backends")
    }
    assert {k: v for k, v in backends.items() if v} == {}
    monitor: dict[str, set[str]] = {}
    for name in _modules_under("jupyter_ktrain.monitor"):
        for module, names in _imports(name).items():
            if _within(module, ("jupyter_ktrain.backends",)):
                monitor.setdefault(module, set()).update(names)
    assert monitor == {"jupyter_ktrain.backends.base": {"Job"}}
    graph = _graph(type_checking=False)  # and that one at type-check time only
    for name in _modules_under("jupyter_ktrain.monitor"):
        assert not _within_any(graph[name], "jupyter_ktrain.backends"), name


def _within_any(modules: set[str], layer: str) -> bool:
    return any(_within(m, (layer,)) for m in modules)


def test_the_layer_check_sees_every_kind_of_import() -> None:
    assert "jupyter_ktrain.pod.progress" in _imports("jupyter_ktrain.jobs")  # module level
    assert _imports("jupyter_ktrain.monitor.live")["jupyter_ktrain.backends.base"] == {"Job"}
    lazy = _imports("jupyter_ktrain.backends.base")  # inside a function
    assert lazy["jupyter_ktrain.backends.results"] == {"progress_from_logs", "results_from_lines"}
