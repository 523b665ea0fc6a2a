"""The live view's stacked panels (one per metric or GPU field), as they appear with data.

Traces are kept here by (panel, key) with the points last drawn, and sent to the browser's
:class:`~jupyter_ktrain.widgets.chart.ChartWidget` by :meth:`PanelFigure.draw`: every panel in
one message, each trace's points as binary arrays (a trace already downsampled by the view).
The static figure of a finished job (:func:`metrics_figure`, for a saved notebook) is plotly's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from array import array
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from ..monitor.viewmodel import fmt_value, plot_panels, summary_values

__all__ = ["FigureAside", "PanelFigure", "Trace", "metrics_figure"]


@dataclass(frozen=True)
class Trace:
    """One line of a panel as the chart draws it: the rank (or GPU) it is, its colour (the
    same in every panel) and the points last drawn."""

    panel: str
    label: str
    colour: str | None
    x: tuple[float, ...]
    y: tuple[float, ...]


def _wire(values: Sequence[float], typecode: str) -> bytes:
    """Points as the chart reads them: little-endian float64 (``d``) or float32 (``f``)."""
    out = array(typecode, values)
    if sys.byteorder != "little":  # pragma: no cover - every supported machine is
        out.byteswap()
    return out.tobytes()


class PanelFigure:
    """The panels and traces of one :class:`~jupyter_ktrain.widgets.chart.ChartWidget`
    (``fig``, the widget the view shows), top to bottom in the order they were added."""

    def __init__(self) -> None:
        from .chart import ChartWidget

        self.fig = ChartWidget()
        self.panels: list[str] = []
        self._titles: dict[str, tuple[str, str]] = {}
        self._traces: dict[tuple[str, Hashable], Trace] = {}
        self._wired: dict[tuple[str, Hashable], dict[str, Any]] = {}
        self._markers: dict[str, list[tuple[float, str]]] = {}
        self.heatmaps: list[dict[str, Any]] = []

    def panel(self, name: str, title: str, x_title: str) -> int:
        """Index of panel ``name``, adding it below the others if new."""
        if name not in self.panels:
            self.panels.append(name)
            self._titles[name] = (title, x_title)
        return self.panels.index(name)

    def title(self, name: str) -> str:
        """Panel ``name``'s title (its y axis and its legend say it)."""
        return self._titles[name][0]

    def set_trace(
        self,
        panel: str,
        key: Hashable,
        label: str,
        colour: str | None,
        xs: Sequence[float],
        ys: Sequence[float],
    ) -> Trace:
        """Trace ``key`` of ``panel`` (a panel added first), drawn in ``colour`` (the
        caller's: one colour per rank in every panel), now with the points ``xs``/``ys``;
        sent with the next :meth:`draw`."""
        trace = Trace(panel, label, colour, tuple(map(float, xs)), tuple(map(float, ys)))
        self._traces[(panel, key)] = trace
        wired = {"x": _wire(trace.x, "d"), "y": _wire(trace.y, "f")}
        self._wired[(panel, key)] = {"label": label, "colour": colour, **wired}
        return trace

    def set_markers(self, markers: dict[str, list[tuple[float, str]]]) -> None:
        """Vertical dotted lines (restarts) in the panels named, at each ``(x, text)``; the
        text shows on hover. Sent with the next :meth:`draw`."""
        self._markers = {name: list(marks) for name, marks in markers.items()}

    def set_heatmaps(self, grids: list[dict[str, Any]]) -> None:
        """The GPUs' heatmaps (one per field, as dicts of
        :class:`~jupyter_ktrain.monitor.glance.GpuGrid`); once there are some, the GPU line
        panels leave. Sent with the next :meth:`draw`."""
        self.heatmaps = grids
        gone = [p for p in self.panels if grids and p.startswith("gpu:")]
        for name in gone:
            self.panels.remove(name)
        self._traces = {k: t for k, t in self._traces.items() if k[0] not in gone}
        self._wired = {k: w for k, w in self._wired.items() if k[0] not in gone}

    def draw(self) -> None:
        """Every panel, its traces and markers, and the heatmaps to the browser, in one
        message."""
        with self.fig.hold_sync():
            self.fig.heatmaps = self.heatmaps
            self._draw_panels()

    def _draw_panels(self) -> None:
        self.fig.panels = [
            {
                "id": name,
                "title": self._titles[name][0],
                "x_title": self._titles[name][1],
                "markers": [{"x": x, "text": text} for x, text in self._markers.get(name, ())],
                "traces": [w for (p, _), w in self._wired.items() if p == name],
            }
            for name in self.panels
        ]

    def traces(self, panel: str) -> list[Trace]:
        return [t for (p, _), t in self._traces.items() if p == panel]


class FigureAside:
    """A :class:`PanelFigure` made in a thread of its own as soon as a view is shown, not in
    its first redraw with data.

    Why: the first chart of a kernel imports anywidget (and what it pulls in): a second of
    CPU under a training job's load. Made in the follow loop's thread at the first metric,
    an import like it froze the header, logs and alerts while the side panel went on. Made
    aside, the follow loop keeps updating meanwhile; the figure is shown (added to the
    view) with its first data."""

    def __init__(self) -> None:
        self._figure: PanelFigure | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is not None:
            return

        def make() -> None:
            with contextlib.suppress(Exception):  # else made again in ready(), where
                self._figure = PanelFigure()  # its error shows

        self._thread = threading.Thread(target=make, name="ktrain-figure", daemon=True)
        self._thread.start()

    def ready(self, wait: bool) -> PanelFigure | None:
        """The figure once made (None while its thread works and ``wait`` is false)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            if not wait:
                return None
            thread.join()
        if self._figure is None:
            self._figure = PanelFigure()
        return self._figure


def metrics_figure(model: Any, title: str | None = None) -> Any:
    """A static plotly ``Figure`` of a model's panels (see
    :func:`~jupyter_ktrain.monitor.viewmodel.plot_panels`), downsampled like the live view,
    with the values reported once in its title; None when there is no panel."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = plot_panels(model, gpu_lines=True)  # a saved notebook keeps every GPU's line
    if not panels:
        return None
    fig = make_subplots(rows=len(panels), cols=1, subplot_titles=[p.key.title for p in panels])
    for row, panel in enumerate(panels, start=1):
        for trace in panel.traces:
            xs, ys = trace.series.points()
            fig.add_trace(
                go.Scatter(x=xs, y=ys, mode="lines", name=f"{panel.key.name}: {trace.label}",
                           line={"color": trace.colour}),
                row=row,
                col=1,
            )  # fmt: skip
        fig.update_xaxes(title_text=panel.key.x_title, row=row)
    values = " · ".join(f"{v.name} {fmt_value(v.value)}" for v in summary_values(model))
    head = title or model.header.name
    fig.update_layout(
        height=260 * len(panels) + 80, title=f"{head}<br><sub>{values}</sub>" if values else head
    )
    return fig
