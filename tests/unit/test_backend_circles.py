"""No import circle through the job store, the backend interface or the local backend, counting
every import (module level, inside functions, under ``if TYPE_CHECKING:``): moving an import
into a function does not remove a dependency, it hides it."""

from __future__ import annotations

from tests.unit.test_import_cycles import _circles, _imports, _modules_under

AREAS = (
    "jupyter_ktrain.store",
    "jupyter_ktrain.backends.local",
    "jupyter_ktrain.backends.base",
    "jupyter_ktrain.backends.capabilities",
    "jupyter_ktrain.backends.logsource",
    "jupyter_ktrain.backends.registry",
    "jupyter_ktrain.backends.warm_shape",
    "jupyter_ktrain.backends.results",
    "jupyter_ktrain.config",
)


def _every_import_graph() -> dict[str, set[str]]:
    modules = set(_modules_under("jupyter_ktrain"))
    graph: dict[str, set[str]] = {}
    for name in modules:
        edges: set[str] = set()
        for module, names in _imports(name).items():
            found = {f"{module}.{n}" for n in names} & modules  # ``from . import submodule``
            edges |= found or ({module} & modules)
        graph[name] = edges - {name}
    return graph


def test_no_circle_at_any_level_through_the_store_and_the_local_backend() -> None:
    mine = [
        c
        for c in _circles(_every_import_graph())
        if any(m == a or m.startswith(a + ".") for m in c for a in AREAS)
    ]
    assert mine == []
