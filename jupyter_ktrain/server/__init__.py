"""The Jupyter server extension behind the JupyterLab "ktrain jobs" panel.

``/ktrain/api/jobs[/NAME[/logs|/metrics|/cancel]]`` and ``/ktrain/api/sweeps[/NAME]``: thin
tornado handlers (:mod:`.handlers`) over a Jupyter-free core (:mod:`.core`). Enabled by
``jupyter-config/jupyter_server_config.d/jupyter_ktrain.json`` (installed with the package),
or by hand with ``jupyter server extension enable jupyter_ktrain``.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["BACKENDS_ENV", "_load_jupyter_server_extension", "served_backends"]

BACKENDS_ENV = "KTRAIN_PANEL_BACKENDS"


def served_backends() -> list[str]:
    """Backends the panel lists: ``$KTRAIN_PANEL_BACKENDS`` (comma-separated, e.g.
    ``local,kubernetes``) when set; else ``local`` plus the default backend of ``%%ktrain``
    (``%ktrain config backend=kubernetes``, or ``kubernetes`` in a notebook pod)."""
    raw = os.environ.get(BACKENDS_ENV, "")
    names = [b.strip() for b in raw.split(",") if b.strip()]
    if names:
        return names
    from ..runner.verbs import Target

    return Target().listed()


def _load_jupyter_server_extension(server_app: Any) -> None:
    """Add the ``/ktrain/api`` handlers to the running server's web app."""
    from .core import PanelCore
    from .handlers import setup_handlers

    core = PanelCore.from_config(served_backends)  # the user's config, read per request
    setup_handlers(server_app.web_app, core)
    server_app.log.info("jupyter-ktrain panel API at /ktrain/api (backends now: %s)",
                        ", ".join(served_backends()))  # fmt: skip
