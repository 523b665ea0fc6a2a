"""Prints the files (relative to site-packages) of a distribution and of everything it
requires on this Python, one a line: what torch-image.sh puts in the torch layer."""

from __future__ import annotations

import sys
from importlib.metadata import distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def closure(name: str) -> list[str]:
    """``name`` and every distribution it requires here, extras followed (torch asks for
    ``cuda-toolkit[cudart,...]``, whose libraries come with those extras only)."""
    seen: dict[str, set[str]] = {}
    todo: list[tuple[str, set[str]]] = [(name, set())]
    while todo:
        n, extras = todo.pop()
        key = canonicalize_name(n)
        if key in seen and extras <= seen[key]:
            continue
        seen.setdefault(key, set()).update(extras)
        for text in distribution(n).requires or []:
            req = Requirement(text)
            wanted = [{"extra": e} for e in seen[key]] or [{"extra": ""}]
            if req.marker and not any(req.marker.evaluate(env) for env in wanted):
                continue
            todo.append((req.name, set(req.extras)))
    return list(seen)


def main() -> None:
    for name in closure(sys.argv[1]):
        for f in distribution(name).files or []:
            parts = f.parts
            if parts and parts[0] != ".." and "__pycache__" not in parts:
                print(f.as_posix())


if __name__ == "__main__":
    main()
