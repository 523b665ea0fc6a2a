"""A build hook that runs before hatch-jupyter-builder's: a wheel or sdist carries the JupyterLab
side panel, built from ``labextension/`` (TypeScript) with Node.js and npm. Without npm, and
without a built panel to reuse (an sdist has one), the build stops here with what to install,
instead of hatch-jupyter-builder's "could not find cmd (npm)" after its own set-up."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUILT = Path("jupyter_ktrain/labextension/static/style.js")


class PanelBuildCheck(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name not in ("wheel", "sdist") or version != "standard":
            return
        if (Path(self.root) / BUILT).exists() or shutil.which("npm"):
            return
        raise RuntimeError(
            "jupyter-ktrain's wheel and sdist carry its JupyterLab side panel, built from "
            "labextension/ with Node.js (20 or newer) and npm, and npm is not on PATH: install "
            "Node.js and npm (Debian/Ubuntu: apt-get install nodejs npm) and build again, or "
            "build the wheel from the released sdist, which carries the built panel."
        )
