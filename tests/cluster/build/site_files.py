"""Prints the files (relative to site-packages) of a distribution and of everything it
requires on this Python, one a line: what site-image.sh puts in a base image's layer. With a
folder, writes there the console scripts of those distributions as pip writes them for the
image's ``/usr/bin/python3`` (``torchrun``, ``ray``: KubeRay's pods run ``ray start``).

    python site_files.py 'ray[default]' SCRIPTS/usr/local/bin"""

from __future__ import annotations

import sys
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SCRIPT = """#!/usr/bin/python3
import re
import sys
from {module} import {first}
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({call}())
"""


def closure(requirement: str) -> list[str]:
    """The distribution ``requirement`` names and every one it requires here, extras followed
    (``ray[default]`` asks for the dashboard's; torch for ``cuda-toolkit[cudart,...]``, whose
    libraries come with those extras only)."""
    top = Requirement(requirement)
    seen: dict[str, set[str]] = {}
    todo: list[tuple[str, set[str]]] = [(top.name, set(top.extras))]
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


def write_scripts(names: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        for ep in distribution(name).entry_points.select(group="console_scripts"):
            module, _, call = ep.value.partition(":")
            text = SCRIPT.format(module=module.strip(), first=call.split(".")[0], call=call)
            path = folder / ep.name
            path.write_text(text)
            path.chmod(0o755)


def main() -> None:
    names = closure(sys.argv[1])
    for name in names:
        for f in distribution(name).files or []:
            parts = f.parts
            if parts and parts[0] != ".." and "__pycache__" not in parts:
                print(f.as_posix())
    if len(sys.argv) > 2:
        write_scripts(names, Path(sys.argv[2]))


if __name__ == "__main__":
    main()
