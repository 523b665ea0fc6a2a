"""The cell monitor's charts as one small anywidget: SVG drawn by ``chart.js``, no plotly.js.

Why not plotly's ``FigureWidget``: it opens with plotly.js (~5 MB) as its module, and the
browser evaluates and draws it in one main-thread task: the page froze 2-4 s when a job's
first chart drew, and 0.4-1.5 s for each warm run's new widget, at a fixed 700 px that
overflowed a narrow output area. This module is a few kilobytes; it draws in an animation
frame at its container's width and again when that width changes (a ``ResizeObserver``).

The one synced trait, ``panels``, holds every panel with its traces; a trace's points go as
binary buffers (x float64, y float32, little-endian), which ipywidgets sends beside the JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

__all__ = ["ChartWidget"]


class ChartWidget(anywidget.AnyWidget):
    """``panels``: ``[{"id", "title", "x_title", "markers": [{"x", "text"}], "traces":
    [{"label", "colour", "x": bytes, "y": bytes}]}]``, top to bottom; ``heatmaps``: from 8
    GPUs up, one grid per GPU field (:class:`~jupyter_ktrain.monitor.glance.GpuGrid` as a
    dict), drawn above them as one table with a selector for the field."""

    _esm = Path(__file__).with_name("chart.js")
    panels: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    heatmaps: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
