"""What the "Open in side panel" button says where the side panel is not loaded: a tiny
anywidget beside the button (``panelhint.js``). The button is handled in the browser by the
JupyterLab extension (:func:`~.monitor.open_in_panel`), so the kernel cannot tell whether a
click did anything; the page can: the extension marks ``<body data-ktrain-panel>`` when it
loads, and without that mark the click shows :data:`HINT` here instead of nothing."""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets

__all__ = ["HINT", "PanelHint"]

HINT = (
    "The ktrain jobs side panel is not loaded in this page: it comes with jupyter-ktrain "
    "installed in the environment JupyterLab runs from (`pip install jupyter-ktrain` there, "
    "then restart JupyterLab). Elsewhere (Jupyter Notebook, VS Code), `%ktrain list` and "
    "`%ktrain logs NAME` show the same."
)


class PanelHint(anywidget.AnyWidget):
    """Watches the button of classes ``button_class`` and ``name_class`` (``ktrain-open-panel``
    and ``ktrain-job-NAME``) and says :data:`HINT` when a click on it finds no side panel."""

    _esm = Path(__file__).with_name("panelhint.js")
    button_class = traitlets.Unicode("").tag(sync=True)
    name_class = traitlets.Unicode("").tag(sync=True)
    hint = traitlets.Unicode(HINT).tag(sync=True)
