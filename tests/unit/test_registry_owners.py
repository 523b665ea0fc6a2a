"""Each registry of the Kubernetes backend's shared cluster context (``cluster.py``:
``watches``, ``runtimes``, ``kinds``, ``queue``) is written by one part only, its owner; every
other part calls the owner's functions or the registry's own methods. The check reads every
module of ``backends/kubernetes/`` and names each write outside the owner (file:line)."""

from __future__ import annotations

import ast
from pathlib import Path

import jupyter_ktrain

ROOT = Path(jupyter_ktrain.__file__).resolve().parent / "backends" / "kubernetes"

#: registry -> the module that may write it ("": none may, the registry writes itself in its
#: own methods: Runtimes in status/job_runtime.py, QueuePositions in status/kueue.py)
OWNERS = {"watches": "lookup.py", "kinds": "lookup.py", "runtimes": "", "queue": ""}
#: the methods of a dict that change it
MUTATORS = {"pop", "popitem", "clear", "setdefault", "update", "__setitem__", "__delitem__"}


def _registry(node: ast.AST) -> str | None:
    """The registry ``node`` is, when it is ``cluster.NAME`` or ``<...>.cluster.NAME``."""
    if not isinstance(node, ast.Attribute) or node.attr not in OWNERS:
        return None
    owner = node.value
    if isinstance(owner, ast.Name) and owner.id == "cluster":
        return node.attr
    if isinstance(owner, ast.Attribute) and owner.attr == "cluster":
        return node.attr
    return None


def _inside(node: ast.AST) -> str | None:
    """The registry an expression written to lies in (``cluster.kinds[x]``,
    ``cluster.queue.served``), at any depth."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        found = _registry(node)
        if found is not None:
            return found
        node = node.value
    return None


def registry_writes(source: str) -> list[tuple[str, int]]:
    """(registry, line) of each write to a registry in ``source``: an assignment or ``del``
    to it or into it, a dict method that changes it, and any item access of ``runtimes``
    (a registry read by item would make entries)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            name = _inside(target)
            if name is not None:
                found.append((name, node.lineno))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = _registry(node.func.value)
            if name is not None and node.func.attr in MUTATORS:
                found.append((name, node.lineno))
        if isinstance(node, ast.Subscript) and _registry(node.value) == "runtimes":
            found.append(("runtimes", node.lineno))
    return sorted(set(found), key=lambda f: f[1])


def test_each_registry_of_the_cluster_context_is_written_by_its_owner_only() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for name, line in registry_writes(path.read_text()):
            if OWNERS[name] != where:
                owner = OWNERS[name] or "its own methods"
                offenders.append(f"{where}:{line} writes {name} (owned by {owner})")
    assert not offenders, "\n".join(offenders)


def test_the_check_sees_each_way_of_writing_a_registry() -> None:
    source = (
        "cluster.kinds[name] = kind\n"
        "self.cluster.watches.pop(name, None)\n"
        "del cluster.kinds[name]\n"
        "cluster.queue.served = False\n"
        "rt = self.cluster.runtimes[name]\n"
        "cluster.watches = {}\n"
        "x = cluster.kinds.get(name)\n"  # a read: no write
        "rt = cluster.runtimes.of(name)\n"  # the registry's own method
        "self.watches.add(watch)\n"  # not the cluster context's
    )
    assert registry_writes(source) == [
        ("kinds", 1),
        ("watches", 2),
        ("kinds", 3),
        ("queue", 4),
        ("runtimes", 5),
        ("watches", 6),
    ]
