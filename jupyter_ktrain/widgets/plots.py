"""One plotly FigureWidget holding stacked panels that appear as data arrives.

Why one figure: every FigureWidget opens with plotly's ~5 MB JavaScript bundle (anywidget
``_esm``) in its ``comm_open``; a figure per metric would cost that many times over. Panels
are axes pairs ``x{k}/y{k}`` whose domains are re-laid out when a panel is added; traces are
added once and later only their ``x``/``y`` change, inside ``batch_update`` (one message).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable
from typing import Any

from ..monitor.viewmodel import fmt_value, plot_panels, summary_values

__all__ = ["FigureAside", "PanelFigure", "plot_arrays"]


def plot_arrays(xs: list[float], ys: list[float]) -> tuple[Any, Any]:
    """A trace's points as plotly sends them best: float arrays (lists without numpy)."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover - numpy is optional
        return xs, ys
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float32)


def _axis(k: int, letter: str) -> tuple[str, str]:
    """(layout key, trace ref) of panel ``k`` (0-based): ``xaxis``/``x``, ``xaxis2``/``x2``."""
    suffix = "" if k == 0 else str(k + 1)
    return f"{letter}axis{suffix}", f"{letter}{suffix}"


def _legend(k: int) -> str:
    return "legend" if k == 0 else f"legend{k + 1}"


class PanelFigure:
    def __init__(self, *, panel_height: int = 200, gap: int = 60, width: int | None = None) -> None:
        import plotly.graph_objects as go

        self.panel_height = panel_height
        self.gap = gap
        layout: dict[str, Any] = {
            "height": 60,
            "margin": {"l": 60, "r": 10, "t": 30, "b": 40},
            "uirevision": "keep",  # keep the user's zoom and hidden traces across updates
            "showlegend": True,
        }
        if width is not None:
            layout["width"] = width
        self.fig = go.FigureWidget(layout=layout)
        self.panels: list[str] = []
        self._titles: dict[str, tuple[str, str]] = {}
        self._traces: dict[tuple[str, Hashable], Any] = {}

    def panel(self, name: str, title: str, x_title: str) -> int:
        """Index of panel ``name``, adding it (and re-laying out all panels) if new."""
        if name in self.panels:
            return self.panels.index(name)
        self.panels.append(name)
        self._titles[name] = (title, x_title)
        self._layout()
        return len(self.panels) - 1

    def _layout(self) -> None:
        """Every panel's axes and legend, each set as a whole object in one update: plotly.js
        refuses an update that sets ``xaxis2`` and ``xaxis2.domain`` together (what
        ``update_layout`` sends for a new axis), and logs an error in the browser console."""
        n = len(self.panels)
        ph, gap = self.panel_height, self.gap
        total = n * ph + (n - 1) * gap
        layout = self.fig.layout
        with self.fig.batch_update():
            layout.height = total + 80
            for k, name in enumerate(self.panels):
                top = 1 - k * (ph + gap) / total
                bottom = max(0.0, top - ph / total)
                title, x_title = self._titles[name]
                xkey, xref = _axis(k, "x")
                ykey, yref = _axis(k, "y")
                layout[xkey] = {"domain": [0, 1], "anchor": yref, "title": {"text": x_title}}
                layout[ykey] = {"domain": [bottom, top], "anchor": xref, "title": {"text": title}}
                # one legend per panel, beside it (plotly's legend, legend2, ...)
                layout[_legend(k)] = {"y": top, "yanchor": "top", "x": 1.01, "xanchor": "left",
                                      "title": {"text": title}}  # fmt: skip

    def trace(self, panel: str, key: Hashable, label: str, colour: str | None = None) -> Any:
        """The trace for ``key`` in ``panel`` (created empty on first use), drawn in
        ``colour`` (the caller's: one colour per rank in every panel)."""
        trace = self._traces.get((panel, key))
        if trace is None:
            k = self.panels.index(panel)
            self.fig.add_scatter(
                x=[],
                y=[],
                mode="lines",
                name=label,
                xaxis=_axis(k, "x")[1],
                yaxis=_axis(k, "y")[1],
                legend=_legend(k),
                line={"color": colour} if colour else {},
            )
            trace = self.fig.data[-1]
            self._traces[(panel, key)] = trace
        return trace

    def set_markers(self, markers: dict[str, list[tuple[float, str]]]) -> None:
        """Vertical dotted lines (restarts) in the panels named, at each ``(x, text)``; the
        text shows on hover. Every panel's markers in one layout update."""
        shapes, notes = [], []
        for name, marks in markers.items():
            k = self.panels.index(name)
            xref, yref = _axis(k, "x")[1], _axis(k, "y")[1] + " domain"
            for x, text in marks:
                shapes.append(
                    {
                        "type": "line",
                        "xref": xref,
                        "yref": yref,
                        "x0": x,
                        "x1": x,
                        "y0": 0,
                        "y1": 1,
                        "line": {"dash": "dot", "color": "#888"},
                    }
                )
                note = {"text": "↻", "hovertext": text, "showarrow": False, "yanchor": "bottom"}
                notes.append({"xref": xref, "yref": yref, "x": x, "y": 1, **note})
        with self.fig.batch_update():
            self.fig.layout.shapes = shapes
            self.fig.layout.annotations = notes

    def traces(self, panel: str) -> list[Any]:
        return [t for (p, _), t in self._traces.items() if p == panel]


class FigureAside:
    """A :class:`PanelFigure` made in a thread of its own as soon as a view is shown, not in
    its first redraw with data.

    Why: the first ``FigureWidget`` of a kernel imports plotly's widget half (its
    renderers pull in nbformat and jsonschema): 2.7 s of CPU on an idle machine, more
    under a training job's load. Made in the follow loop's thread at the first metric,
    it froze the header, logs and alerts for 3-6 s while the side panel went on. Made
    aside, the follow loop keeps updating meanwhile; the figure is shown (added to the
    view) with its first data, at its container's width."""

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

    panels = plot_panels(model)
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
