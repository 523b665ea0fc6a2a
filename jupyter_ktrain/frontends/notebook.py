"""The notebook front: how the runner speaks in a Jupyter kernel (``%%ktrain`` and
``ktrain.run`` in a cell). Messages are printed into the cell; a followed job is shown in the
widget monitor (``KTRAIN_MONITOR=text``, or a kernel without widgets: the text view), with its
controls routed so they work while the cell blocks; the names rank 0 bound are set in the
kernel. A sweep is one live widget (:class:`~.widgets.sweep.SweepWidget`), drawn from its
record each time the sweep writes it; the lines it says while it runs go into that widget's
folded log (the text view: printed, as any message).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import KtrainError
from ..extras import EXTRAS, missing_modules
from ..runner.front import TextFront
from ..sweep.record import SweepRecord
from ..widgets.controls import control_subshell, route_to_subshell
from ..widgets.monitor import (
    MonitorView,
    in_kernel,
    make_view,
    open_in_panel,
    widgets_available,
)
from ..widgets.sweep import SweepWidget

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import View
    from ..monitor.model import MonitorModel

__all__ = ["NotebookFront", "last_monitor", "say"]

_last_monitor: tuple[MonitorModel, View] | None = None


def say(text: str) -> None:
    """One message into the cell (stdout as it is now: IPython captures it per cell)."""
    TextFront().say(text)


def last_monitor() -> tuple[MonitorModel, View] | None:
    """The model and view of the most recent followed job in this kernel (for tests and
    debugging: ``model.metrics``, ``view.plot_history``)."""
    return _last_monitor


class NotebookFront(TextFront):
    """The runner's front in a kernel: it speaks as :class:`TextFront` does, shows the widget,
    and ``shell`` (IPython's, or None) gets the bound names."""

    def __init__(self, shell: Any) -> None:
        super().__init__()
        self.shell = shell
        self.sweep: SweepWidget | None = None

    def say(self, text: str) -> None:
        if self.sweep is not None and self.sweep.live:
            self.sweep.say(text)
        else:
            super().say(text)

    def show_sweep(self, record: SweepRecord) -> None:
        """The sweep's widget (shown at its first record), drawn as ``record`` says; nothing
        with the text view (its lines are printed)."""
        if self.sweep is None:
            if not _widgets():
                return
            self.sweep = SweepWidget(record.name)
            self.sweep.show()
        self.sweep.update(record)

    def bind(self, outputs: Mapping[str, Any]) -> None:
        if self.shell is None:
            return
        self.shell.user_ns.update(outputs)
        if outputs:
            say(f"Set from rank 0: {', '.join(sorted(outputs))}")

    def view(self, job: Job, model: MonitorModel) -> View:
        """The widget monitor in a kernel with widgets, its controls routed so they work
        while the cell blocks; else the text view."""
        global _last_monitor
        views: list[View] = []

        def cancel() -> None:
            shown = views[0] if views else None
            if isinstance(shown, MonitorView):
                shown.cancelling()
            try:
                job.cancel()
            except KtrainError as exc:
                if isinstance(shown, MonitorView):
                    shown.cancel_failed()
                say(f"ktrain: could not cancel {job.name!r}: {exc}")

        view = make_view(
            model, prefer_widgets=_widgets(), on_cancel=cancel, on_open_panel=open_in_panel
        )
        views.append(view)
        if isinstance(view, MonitorView):
            subshell = control_subshell()
            if subshell is not None:
                route_to_subshell(view.controls(), subshell)
        _last_monitor = (model, view)
        return view


_said_no_widgets = False


def _widgets() -> bool:
    """Whether the job shows in the widget: wanted (:func:`_prefer_widgets`) and possible. In
    a kernel without the ``notebook`` extra's packages the cell says so once per kernel, with
    the ``pip install`` that adds them, and shows the job as text."""
    global _said_no_widgets
    if not _prefer_widgets():
        return False
    if widgets_available():
        return True
    gone = missing_modules(EXTRAS["notebook"].modules)
    if gone and in_kernel() and not _said_no_widgets:
        _said_no_widgets = True
        say(
            f"ktrain: the live widget needs {', '.join(gone)}, not installed in this kernel: "
            f"`{EXTRAS['notebook'].install}`, then restart the kernel; the job is shown as text."
        )
    return False


def _prefer_widgets() -> bool:
    """Widgets unless ``KTRAIN_MONITOR=text``."""
    return os.environ.get("KTRAIN_MONITOR", "auto").strip().lower() != "text"
