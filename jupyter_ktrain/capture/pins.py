"""Third-party packages the captured code imports, pinned to the kernel's versions, and the
notebook's own local modules (files next to the notebook), which travel with the program."""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

__all__ = ["Requirements", "distribution_pins"]

_OURS = {"jupyter_ktrain"}
_MAX_LOCAL_BYTES = 4 * 1024 * 1024


@lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


def distribution_pins(top_module: str) -> list[str]:
    """``name==version`` for the installed distributions providing ``top_module``."""
    pins = []
    for dist in sorted(set(_distributions().get(top_module, []))):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        pins.append(f"{dist}=={version.split('+')[0]}")
    return pins


def _site_dirs() -> list[Path]:
    return [Path(p).resolve() for p in sys.path if "site-packages" in p or "dist-packages" in p]


@dataclass
class Requirements:
    """Accumulates modules the program needs; classifies each top-level package once."""

    tops: dict[str, str] = field(default_factory=dict)  # top module -> "stdlib"|"dist"|"local"|"?"

    def add_module(self, module_name: str | None) -> None:
        if not module_name or module_name == "__main__" or module_name.startswith("_"):
            return
        top = module_name.split(".")[0]
        if top in self.tops or top in _OURS:
            return
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            self.tops[top] = "stdlib"
        elif _distributions().get(top):
            self.tops[top] = "dist"
        elif self._local_path(top) is not None:
            self.tops[top] = "local"
        else:
            self.tops[top] = "?"

    @staticmethod
    def _local_path(top: str) -> Path | None:
        module = sys.modules.get(top)
        file = getattr(module, "__file__", None)
        portions = {Path(p).resolve() for p in getattr(module, "__path__", None) or []}
        if file:
            path = Path(file).resolve()
        elif len(portions) == 1:  # a namespace package (a folder without __init__.py)
            path = portions.pop() / "__init__.py"
        else:
            return None
        if any(site in path.parents for site in _site_dirs()):
            return None
        return path.parent if path.name == "__init__.py" else path

    def pins(self) -> list[str]:
        out: list[str] = []
        for top, kind in sorted(self.tops.items()):
            if kind == "dist":
                out.extend(distribution_pins(top))
        return sorted(dict.fromkeys(out))

    def local_files(self) -> dict[str, bytes]:
        """Source files of the notebook's own modules, relative to the code directory."""
        files: dict[str, bytes] = {}
        for top, kind in sorted(self.tops.items()):
            path = self._local_path(top) if kind == "local" else None
            if path is None:
                continue
            if path.is_dir():
                for f in sorted(path.rglob("*.py")):
                    files[f"{top}/{f.relative_to(path).as_posix()}"] = f.read_bytes()
            else:
                files[path.name] = path.read_bytes()
        if sum(len(v) for v in files.values()) > _MAX_LOCAL_BYTES:
            return {}
        return files
