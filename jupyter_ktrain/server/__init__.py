"""The Jupyter server extension behind the JupyterLab "ktrain jobs" panel.

``/ktrain/api/jobs[/NAME[/logs|/metrics|/cancel]]``: thin tornado handlers
(:mod:`.handlers`) over a Jupyter-free core (:mod:`.core`). Enabled by
``jupyter-config/jupyter_server_config.d/jupyter_ktrain.json`` (installed with the package),
or by hand with ``jupyter server extension enable jupyter_ktrain``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["BACKENDS_ENV", "_load_jupyter_server_extension", "served_backends"]

BACKENDS_ENV = "KTRAIN_PANEL_BACKENDS"


def served_backends() -> list[str]:
    """Backends the panel lists: ``$KTRAIN_PANEL_BACKENDS`` (comma-separated, e.g.
    ``local,kubernetes``) when set; else ``local`` plus the user's configured default backend
    (``%ktrain config backend=kubernetes``)."""
    raw = os.environ.get(BACKENDS_ENV, "")
    names = [b.strip() for b in raw.split(",") if b.strip()]
    if names:
        return names
    configured = _configured_backend()
    return ["local"] if configured in (None, "local") else ["local", configured]


def _configured_backend() -> str | None:
    """``backend`` of the user config, when this version has one (``jupyter_ktrain.config``)."""
    try:
        config = importlib.import_module("jupyter_ktrain.config")
    except ModuleNotFoundError:
        return None
    backend = config.load_config().backend
    return str(backend) if backend else None


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Add the ``/ktrain/api`` handlers to the running server's web app."""
    from .core import PanelCore
    from .handlers import setup_handlers

    core = PanelCore.from_config(served_backends)  # the user's config, read per request
    setup_handlers(server_app.web_app, core)
    server_app.log.info("jupyter-ktrain panel API at /ktrain/api (backends now: %s)",
                        ", ".join(served_backends()))  # fmt: skip
