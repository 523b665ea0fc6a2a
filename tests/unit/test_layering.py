"""The package's layers point down only.

- The Kubernetes backend is reached through the backend registry only: no front end (the
  magic, ``ktrain render``, YAML specs), view or other backend imports from
  ``jupyter_ktrain/backends/kubernetes/``, so each can change without the others.
- The top-level folders and modules stand in a declared order (:data:`LAYERS`, bottom first):
  none imports one of a higher layer, and no two import each other, counting every import
  (module level, inside functions, under ``if TYPE_CHECKING:``). A failure names each import
  that breaks the order (file:line)."""

from __future__ import annotations

import ast
from pathlib import Path

import jupyter_ktrain

PACKAGE = Path(jupyter_ktrain.__file__).resolve().parent
KUBERNETES = "jupyter_ktrain.backends.kubernetes"
ALLOWED = ("backends/kubernetes/", "backends/registry.py")  # the backend and the registry


def imports_at(source: str, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Every module ``source`` (the module ``module``) imports, with the import's line, at any
    level (in functions and under ``if TYPE_CHECKING:`` too), relative imports resolved; for
    ``from X import name`` both ``X`` and ``X.name`` (a name may be a submodule)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            found.append((target, node.lineno))
            found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return found


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """The modules of :func:`imports_at`, without their lines."""
    return {name for name, _line in imports_at(source, module, is_package)}


def module_of(path: Path, package: Path = PACKAGE) -> tuple[str, bool]:
    """The module a file of ``package`` is, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def kubernetes_imports(path: Path) -> set[str]:
    module, is_package = module_of(path)
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
        "import jupyter_ktrain.backends.kubernetes.client.kube_api\n"
        "from .. import backends\n"
    )
    found = imported_modules(source, "jupyter_ktrain.server.core", is_package=False)
    assert {
        "jupyter_ktrain.backends.kubernetes.rdma",
        "jupyter_ktrain.backends.kubernetes",
        "jupyter_ktrain.backends.kubernetes.client.kube_api",
        "jupyter_ktrain.backends",
    } <= found
    registry = imported_modules(
        "from .kubernetes.backend import X\n", "jupyter_ktrain.backends", True
    )
    assert "jupyter_ktrain.backends.kubernetes.backend" in registry


# -- the layers of the top level, bottom first ------------------------------------------------
# A top-level folder or module imports only its own layer and the ones below (never a higher
# one), and no two import each other. A new top-level name is placed here, on purpose.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "pod", "kinds", "failures", "jobs", "hangs"),  # the job vocabulary, the pod's code
    ("words", "store", "capture", "packaging", "extras"),  # the job store, the code, the image
    ("config", "sweep_spec"),  # the user's defaults; a sweep's values
    ("spec",),  # what a job is asked to be, what it is made of, its presets
    ("tracking",),  # MLflow runs, fed from the job store's records
    ("backends",),  # local and Kubernetes, behind one interface
    ("monitor", "rank_stacks", "flags"),  # reading a job; its ranks' stacks; job flags, YAML files
    ("runner",),  # the job service: every verb
    ("sweep",),  # a client of the service: many runs of one cell
    ("widgets",),  # the views
    ("frontends", "server"),  # the front ends: magic, console script, ktrain.run, the panel's API
)
TOP = "jupyter_ktrain"


def top_level(module: str, package: Path = PACKAGE) -> str | None:
    """``jupyter_ktrain.backends.local.plan_parts`` -> ``backends``; the package itself, or a name
    its ``__init__`` defines (``__version__``): None."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != TOP:
        return None
    name = parts[1]
    return name if (package / name).is_dir() or (package / f"{name}.py").is_file() else None


def folder_graph(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) top-level name -> the imports that make that arrow, each as
    ``file:line``, from every import of the package (module level, in functions, under
    ``if TYPE_CHECKING:``). The package's ``__init__`` (the public face) is no layer."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module, is_package = module_of(path, package)
        here = top_level(module, package)
        if here is None:
            continue
        where = path.relative_to(package.parent).as_posix()
        for name, line in imports_at(path.read_text(), module, is_package):
            there = top_level(name, package)
            if there is None or there == here:
                continue
            places = arrows.setdefault((here, there), [])
            if f"{where}:{line}" not in places:
                places.append(f"{where}:{line}")
    return arrows


def layer_faults(
    arrows: dict[tuple[str, str], list[str]], layers: tuple[tuple[str, ...], ...]
) -> list[str]:
    """Each arrow that goes up the order or closes a circle, and each top-level name that is
    in no layer, as one line naming the imports."""
    rank = {name: k for k, layer in enumerate(layers) for name in layer}
    faults = sorted(
        f"{name} is in no layer of LAYERS: place it"
        for name in {n for pair in arrows for n in pair} - set(rank)
    )
    for (a, b), places in sorted(arrows.items()):
        if a not in rank or b not in rank:
            continue
        if (b, a) in arrows:
            faults.append(f"{a} and {b} import each other: {a} -> {b} at {', '.join(places)}")
        elif rank[b] > rank[a]:
            faults.append(f"{a} imports {b}, a higher layer, at {', '.join(places)}")
    return faults


def test_the_top_level_imports_only_down() -> None:
    faults = layer_faults(folder_graph(), LAYERS)
    assert not faults, "imports against the layers (bottom first: LAYERS):\n" + "\n".join(faults)


def test_the_top_level_has_no_circle() -> None:
    """No circle of top-level names, however long (the layers forbid one; this says which)."""
    from tests.unit.test_import_cycles import _circles

    graph: dict[str, set[str]] = {}
    for a, b in folder_graph():
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    assert _circles(graph) == []


def test_the_layer_check_names_upward_and_mutual_imports(tmp_path: Path) -> None:
    package = tmp_path / TOP
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("from .high import run\n")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "base.py").write_text(
        "def f():\n    from ..high import run\n"  # inside a function: still an arrow
    )
    (package / "high.py").write_text("from .low.base import f\nfrom . import mid\n")
    (package / "mid.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import run\n"
    )
    arrows = folder_graph(package)
    assert arrows == {
        ("low", "high"): [f"{TOP}/low/base.py:2"],
        ("high", "low"): [f"{TOP}/high.py:1"],
        ("high", "mid"): [f"{TOP}/high.py:2"],
        ("mid", "high"): [f"{TOP}/mid.py:3"],
    }
    faults = layer_faults(arrows, (("low",), ("high",)))
    assert faults == [
        "mid is in no layer of LAYERS: place it",
        f"high and low import each other: high -> low at {TOP}/high.py:1",
        f"low and high import each other: low -> high at {TOP}/low/base.py:2",
    ]
    upward = layer_faults({("low", "high"): ["x.py:3"]}, (("low",), ("high",)))
    assert upward == ["low imports high, a higher layer, at x.py:3"]


# -- the front ends are adapters over the job service -------------------------------------------
ADAPTERS = (
    "frontends/commands.py",
    "frontends/cli.py",
    "frontends/magics.py",
    "frontends/api.py",
    "server/",
)
BEHIND_THE_SERVICE = ("backends", "store", "monitor")  # reached through runner/ (or sweep/) only
# What the panel's server still reads of the monitor itself, each import listed: the view-model
# helpers the widget shares with it (colours, number formats, downsampling, the GPU glance's
# types), used to render a payload. To go through the service next; nothing may be added.
NOT_YET = {
    "server/build.py": {"monitor.viewmodel", "monitor.glance", "monitor.model"},
    "server/compare_payload.py": {"monitor.downsample", "monitor.viewmodel"},
    "server/payloads.py": {"monitor.glance"},
}


def adapter_reaches(package: Path = PACKAGE) -> dict[str, dict[str, list[int]]]:
    """Each adapter file -> each module behind the service it imports (``monitor.live``,
    relative to the package) -> the lines, at any level."""
    found: dict[str, dict[str, list[int]]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if not rel.startswith(ADAPTERS):
            continue
        module, is_package = module_of(path, package)
        for name, line in imports_at(path.read_text(), module, is_package):
            parts = name.split(".")
            if parts[0] != TOP or len(parts) < 2 or parts[1] not in BEHIND_THE_SERVICE:
                continue
            inner = ".".join(parts[1:3])  # the module (a name taken from it is the same reach)
            lines = found.setdefault(rel, {}).setdefault(inner, [])
            if line not in lines:
                lines.append(line)
    return found


def test_the_front_ends_reach_jobs_through_the_service_only() -> None:
    """The magic, the console script, the line commands, ``ktrain.run`` and the panel's server
    import no backend, no job store and no monitor: they call the job service's verbs
    (``jupyter_ktrain.runner``, and the sweep's above it) and render what those return.
    A failure names each import (file:line)."""
    reaches = adapter_reaches()
    extra = [
        f"{TOP}/{rel}:{line} imports {TOP}.{module}"
        for rel, modules in sorted(reaches.items())
        for module, lines in sorted(modules.items())
        if module not in NOT_YET.get(rel, set())
        for line in lines
    ]
    assert not extra, "call the job service's verb instead:\n" + "\n".join(extra)
    left = {rel: set(modules) for rel, modules in reaches.items()}
    assert left == NOT_YET, "an import of NOT_YET is gone: strike it from the list"


def test_the_adapter_check_sees_a_reach_inside_a_function(tmp_path: Path) -> None:
    package = tmp_path / TOP
    (package / "server").mkdir(parents=True)
    (package / "frontends").mkdir()
    (package / "server" / "core.py").write_text(
        "from ..runner import verbs\ndef f():\n    from ..store.records import read_hang\n"
    )
    (package / "frontends" / "cli.py").write_text("import jupyter_ktrain.backends.registry\n")
    assert adapter_reaches(package) == {
        "frontends/cli.py": {"backends.registry": [1]},
        "server/core.py": {"store.records": [3]},
    }


# -- a top level a newcomer can read -------------------------------------------------------------
MAX_LINES = 500
MAX_MODULES = 15
# Modules still over MAX_LINES, each to be split along its seams; nothing may be added.
LONG_NOT_YET: set[str] = set()
README = PACKAGE.parent / "README.md"


def test_no_module_is_over_500_lines() -> None:
    long = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if len(path.read_text().splitlines()) > MAX_LINES
    }
    assert long - LONG_NOT_YET == set(), f"split these modules (over {MAX_LINES} lines)"
    assert long == LONG_NOT_YET, "a module of LONG_NOT_YET is short now: strike it from the list"


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {
        folder.relative_to(PACKAGE.parent).as_posix(): count
        for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if (count := len(list(folder.glob("*.py")))) > MAX_MODULES
    }
    assert crowded == {}, f"group these folders' modules into sub-packages: {crowded}"


# File names that may be used more than once: Python's own (a package, its ``-m`` entry), and
# each backend's ``backend.py``, where the registry finds its class (``local.backend``,
# ``kubernetes.backend``): the same role in each backend's folder, one name on purpose.
SHARED_NAMES = {"__init__.py", "__main__.py", "backend.py"}


def names_used_twice(package: Path = PACKAGE) -> dict[str, list[str]]:
    """Each file name used by more than one module of ``package`` (outside
    :data:`SHARED_NAMES`) -> those modules' paths."""
    paths: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        if path.name not in SHARED_NAMES:
            paths.setdefault(path.name, []).append(path.relative_to(package).as_posix())
    return {name: found for name, found in paths.items() if len(found) > 1}


def test_no_file_name_is_used_twice() -> None:
    """A module's name says what it is without its folder: a second ``warm.py`` is named for
    what it holds (``warm_shape.py``, ``warm_runs.py``, ``store/warm_ledger.py``)."""
    twice = names_used_twice()
    assert twice == {}, (
        f"name these modules for what each holds (or list it in SHARED_NAMES): {twice}"
    )


def test_the_name_check_names_each_module(tmp_path: Path) -> None:
    package = tmp_path / TOP
    for rel in ("a/plan.py", "b/plan.py", "a/backend.py", "b/backend.py", "a/__init__.py"):
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text("")
    (package / "b" / "__init__.py").write_text("")
    assert names_used_twice(package) == {"plan.py": ["a/plan.py", "b/plan.py"]}


def readme_map(readme: Path = README) -> list[str]:
    """The lines of the package map in the README's Development section (its ``text`` block)."""
    text = readme.read_text()
    start = text.index("**The package map**")
    block = text.index("```text", start) + len("```text")
    return text[block : text.index("```", block)].strip("\n").splitlines()


def test_the_readme_map_is_the_layers() -> None:
    """Every top-level name is on the README's map, in the order of :data:`LAYERS` (a name's
    layer is never below one named before it)."""
    rank = {name: k for k, layer in enumerate(LAYERS) for name in layer}
    seen: list[str] = []
    for line in readme_map():
        for word in line[:25].split():  # the names column
            name = word.removesuffix("/").removesuffix(".py")
            if name in rank:
                seen.append(name)
    assert set(seen) == set(rank), f"on the map but no layer, or a layer not on the map: {seen}"
    ranks = [rank[name] for name in seen]
    assert ranks == sorted(ranks), f"the map's order is not the layers': {seen}"
