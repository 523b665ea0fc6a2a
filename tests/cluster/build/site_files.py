"""Prints the files (relative to site-packages) of a distribution and of everything it
requires on this Python, one a line: what torch-image.sh puts in the torch layer."""

from __future__ import annotations

import re
import sys
from importlib.metadata import distribution

from packaging.markers import Marker


def closure(name: str) -> list[str]:
    seen: dict[str, None] = {}
    todo = [name]
    while todo:
        n = todo.pop()
        key = n.lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = None
        for req in distribution(n).requires or []:
            spec, _, marker = req.partition(";")
            if marker and not Marker(marker).evaluate({"extra": ""}):
                continue
            todo.append(re.split(r"[ <>=!~\[(]", spec.strip())[0])
    return list(seen)


def main() -> None:
    for name in closure(sys.argv[1]):
        for f in distribution(name).files or []:
            parts = f.parts
            if parts and parts[0] != ".." and "__pycache__" not in parts:
                print(f.as_posix())


if __name__ == "__main__":
    main()
