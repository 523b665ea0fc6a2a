"""The monitor in the ``%%ktrain`` cell: ipywidgets and a small chart widget, or plain text.

Both views read a :class:`~jupyter_ktrain.monitor.model.MonitorModel` and share one small
interface (the monitor's port, :class:`jupyter_ktrain.jobs.View`): ``show()`` once,
``update(now)`` on a timer (every ~0.2 s is fine: each view throttles itself), ``close(now)``
when the job is over or the user detaches. The
text view is :class:`jupyter_ktrain.monitor.text.TextView` (re-exported here); both are fed
by the follow loop through :class:`jupyter_ktrain.monitor.live.ModelSink`.

Rate limits (Jupyter drops output above ~1 MB/s or 1000 messages/s): :class:`MonitorView`
never uses ``Output.append_stdout`` (it resends the whole history). Logs go into small HTML
"chunk" widgets: a flush rewrites only the newest chunk (at most ``chunk_bytes``), full
chunks are frozen and the oldest are dropped from the view, so bytes per flush are bounded
and do not grow with run length. At most ``max_flush_bytes`` of new lines are shown per
flush; a backlog beyond that is skipped with a marker (the lines stay in the log files).
Plots are redrawn every ``plot_interval`` seconds, when a trace has new points, in one
message (the browser draws it in its next frame, at the output area's width); each trace
with new points is downsampled to at most ``plot_points`` (fewer when many change at once,
keeping one redraw's new points under ``max_plot_points``).

Threading: ``update``/``close`` must be called from the thread that feeds the model. Widget
callbacks (rank selector, filter, follow) only set flags that the next ``update`` applies,
so they never read the model while another thread writes it.
"""

from __future__ import annotations

import html
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any

from ..jobs import CANCELLED, View
from ..monitor.logbook import LogEntry
from ..monitor.model import MonitorModel
from ..monitor.text import TextView, header_parts
from ..monitor.viewmodel import (
    NOTICES,
    PanelKey,
    TraceView,
    Who,
    fmt_value,
    plot_panels,
    state_colour,
    summary_values,
)
from .frontend import in_kernel, open_in_panel, widgets_available
from .html import log_line_html, notice_html, replica_table, strip_tags
from .plots import FigureAside
from .rankfilter import RankFilter

__all__ = [
    "PANEL_BUTTON_CLASS",
    "MonitorView",
    "TextView",
    "in_kernel",
    "make_view",
    "open_in_panel",
    "widgets_available",
]

PANEL_BUTTON_CLASS = "ktrain-open-panel"
_ONE_LINE = "white-space:nowrap;overflow:hidden;text-overflow:ellipsis"

Callback = Callable[[], None]


def _matches(entry: LogEntry, needle: str, ranks: RankFilter | None) -> bool:
    return (not needle or needle in entry.text.lower()) and (ranks is None or ranks.shows(entry))


# ---------------------------------------------------------------------------------------
class MonitorView:
    """The widget monitor (see module docstring). ``widget`` is the top-level VBox."""

    def __init__(
        self,
        model: MonitorModel,
        *,
        on_cancel: Callback | None = None,
        on_open_panel: Callback | None = None,
        clock: Callable[[], float] = time.time,
        flush_interval: float = 0.2,
        max_flush_bytes: int = 64_000,
        chunk_bytes: int = 8_000,
        max_chunks: int = 50,
        plot_interval: float = 1.0,
        plot_points: int = 2_000,
        max_plot_points: int = 40_000,
        max_plot_ranks: int = 8,
    ) -> None:
        import ipywidgets as w

        self._w = w
        self.model = model
        self.clock = clock
        self.flush_interval = flush_interval
        self.max_flush_bytes = max_flush_bytes
        self.chunk_bytes = chunk_bytes
        self.max_chunks = max_chunks
        self.plot_interval = plot_interval
        self.plot_points = plot_points
        self.max_plot_points = max_plot_points
        self.max_plot_ranks = max_plot_ranks
        self._lock = threading.Lock()

        # the header takes the row's width beside its buttons, and shrinks (its head cut short)
        self.header = w.HTML(layout=w.Layout(flex="1 1 auto", min_width="0"))
        self.cancel_button = w.Button(
            description="Cancel",
            icon="stop",
            button_style="danger",
            layout=w.Layout(width="auto", min_width="max-content"),
        )
        self.panel_button = w.Button(
            description="Open in side panel",
            icon="external-link",
            layout=w.Layout(width="auto", min_width="max-content"),  # the whole label shows
        )
        self.cancel_button.disabled = on_cancel is None
        self._cancel_requested = False
        self.panel_button.disabled = on_open_panel is None
        if on_cancel is not None:
            self.cancel_button.on_click(lambda _b: on_cancel())
        if on_open_panel is not None:
            self.panel_button.on_click(lambda _b: on_open_panel())
            # what the JupyterLab extension's click listener looks for (see open_in_panel)
            self.panel_button.add_class(PANEL_BUTTON_CLASS)
            self.panel_button.add_class(f"ktrain-job-{model.header.name}")
            self.panel_button.tooltip = "Show this job in JupyterLab's ktrain jobs panel"
        self.panel_hint = _panel_hint(PANEL_BUTTON_CLASS, f"ktrain-job-{model.header.name}")
        self.alerts = w.HTML()
        self.replicas = w.HTML()
        self.rank_select = w.Dropdown(options=[("all ranks", "")], value="", description="Show")
        self.filter_text = w.Text(placeholder="filter lines…", continuous_update=False)
        self.rank_filter = RankFilter(w, self._on_view_change)  # from 16 ranks up
        self.follow = w.ToggleButton(value=True, description="Follow", icon="play")
        self.log_status = w.HTML()
        self.log_box = w.Box(
            layout=w.Layout(
                display="flex",
                flex_flow="column-reverse",  # keeps the scroll pinned to the newest line
                overflow="auto",
                height="320px",
                border="1px solid #ddd",
            )
        )
        self.summary = w.HTML()  # metrics reported once (Trainer's train_runtime...): values
        # a block, not a flex row: the chart then has the container's width (it draws at that
        # width, and again whenever it changes)
        self.plots = w.Box(layout=w.Layout(display="block", width="100%"))
        self.widget = w.VBox(
            [
                w.HBox([self.header, self.cancel_button, self.panel_button]),
                self.panel_hint,
                self.alerts,
                self.replicas,
                w.HBox([self.rank_select, self.filter_text, self.follow, self.log_status]),
                self.rank_filter.widget,
                self.log_box,
                self.summary,
                self.plots,
            ]
        )
        self.rank_select.observe(self._on_view_change, names="value")
        self.filter_text.observe(self._on_view_change, names="value")
        self.follow.observe(self._on_view_change, names="value")

        self._seq = 0
        self._chunks: list[Any] = []
        self._chunk_lines: list[str] = []
        self._chunk_size = 0
        self._label = ""
        self._needle = ""
        self._following = True
        self._rebuild = False
        self._last_flush = float("-inf")
        self._last_plot = float("-inf")
        self._labels: list[str] = []
        self._replica_rows: Any = None
        self._plot: Any = None  # PanelFigure, shown with the first data point
        self._figure = FigureAside()  # made in a thread of its own when shown
        self._closing = False
        self._pushed: dict[tuple[str, Who], tuple[int, int]] = {}  # (revision, points)
        self._markers: tuple[list[tuple[float, str]], list[str]] = ([], [])
        self._summary_seen = -1
        self._grids: list[dict[str, Any]] = []  # the GPU heatmaps last drawn
        self._closed = False
        # (time, points drawn per metric) at each plot redraw: how the plots grew
        self.plot_history: deque[tuple[float, dict[str, int]]] = deque(maxlen=1000)

    # -- widget callbacks: flags only while the job is followed ---------------------------
    def _on_view_change(self, _change: Any) -> None:
        self._rebuild = True
        if self._closed:  # nobody feeds the model any more: apply the change here
            with self._lock:
                self._update_logs()

    def controls(self) -> list[Any]:
        """The widgets whose frontend messages must be handled while the cell blocks."""
        return [self.cancel_button, self.panel_button, self.rank_select, self.filter_text,
                self.follow, self.rank_filter.widget]  # fmt: skip

    # -- public -------------------------------------------------------------------------
    def show(self) -> None:
        from IPython import display

        display.display(self.widget)  # type: ignore[no-untyped-call]
        if self._plot is None:
            self._figure.start()

    def update(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        with self._lock:
            self._update_header(now)
            if now - self._last_flush >= self.flush_interval:
                self._last_flush = now
                self._update_logs()
            if now - self._last_plot >= self.plot_interval:
                self._last_plot = now
                self._update_plots(now)

    def close(self, now: float | None = None) -> None:
        """Final flush: everything shown, buttons disabled. Widgets stay on screen."""
        if self._closed:
            return
        now = self.clock() if now is None else now
        self._last_flush = self._last_plot = float("-inf")
        self._closing = True  # the last redraw waits for the figure
        self.update(now)
        self._closed = True
        self.cancel_button.disabled = True

    # -- the Cancel button: always says what is true -------------------------------------
    def cancelling(self) -> None:
        """The user clicked Cancel: "Cancelling…" (disabled) until the job has ended."""
        self._cancel_requested = True
        self.cancel_button.description = "Cancelling…"
        self.cancel_button.disabled = True

    def cancel_failed(self) -> None:
        """Cancel did not go through: the button is a live "Cancel" again."""
        self._cancel_requested = False
        self.cancel_button.description = "Cancel"
        self.cancel_button.disabled = self.model.header.finished

    def _update_cancel_button(self) -> None:
        h = self.model.header
        if not h.finished:
            return
        self.cancel_button.disabled = True
        self.cancel_button.description = "Cancelled" if h.state == CANCELLED else "Cancel"
        self.cancel_button.icon = "ban" if h.state == CANCELLED else "stop"

    # -- header, replicas, alerts -------------------------------------------------------
    def _update_header(self, now: float) -> None:
        m = self.model
        colour = state_colour(m.header.state)
        head, details = (html.escape(part) for part in header_parts(m, now))
        pct = m.progress.percent if m.progress is not None else None
        bar = "" if pct is None else f' <progress value="{pct:g}" max="100"></progress>'
        # the line that matters on one line, its details on one line under it (each cut short
        # where the row is narrow, whole in its tooltip; the alerts say a restart's why too)
        self.header.value = (
            f'<div class="ktrain-HeaderHead" title="{head}" style="{_ONE_LINE}">'
            f'<b style="color:{colour}">●</b> {head}{bar}</div>'
            f'<div class="ktrain-HeaderDetails" title="{details}" style="color:#666;{_ONE_LINE}">'
            f"{details}</div>"
        )
        self._update_cancel_button()
        alerts = m.alerts()
        self.alerts.value = "".join(
            f'<div style="color:#1f77b4">↻ {html.escape(a.message)}</div>'
            if a.code in NOTICES
            else f'<div style="color:#b35900;white-space:pre-wrap">⚠ {html.escape(a.message)}</div>'
            for a in alerts
        )
        if m.replicas != self._replica_rows:
            self._replica_rows = list(m.replicas)
            self.replicas.value = replica_table(m)
        labels = [self.rank_filter.label(), *m.labels()]  # "every rank": as the filter has it
        if labels != self._labels:
            self._labels = labels
            every, *ranks = labels
            self.rank_select.options = [(every, ""), *((lb, lb) for lb in ranks)]

    # -- logs ---------------------------------------------------------------------------
    def _update_logs(self) -> None:
        ranks_changed = self.rank_filter.update(self.model)
        if self._rebuild or ranks_changed:
            self._rebuild = False
            label, needle = self.rank_select.value or "", self.filter_text.value.lower()
            following = bool(self.follow.value)
            new = (label, needle) != (self._label, self._needle) or ranks_changed
            if new or following != self._following:
                self._label, self._needle, self._following = label, needle, following
                self._reset_logs()
        if not self._following:
            pending = sum(1 for _ in self.model.lines_after(self._seq, self._label or None))
            self.log_status.value = f"paused · {pending} new line(s)" if pending else "paused"
            return
        entries = list(self.model.lines_after(self._seq, self._label or None))
        if not entries:
            return
        lines: list[str] = []
        if self._seq and self.model.left_after(self._seq, self._label or None):
            lines.append(notice_html("older lines left the view; they are in the log files"))
        budget = self.max_flush_bytes
        start = 0
        approx = sum(len(e.text) + 24 for e in entries)
        if approx > budget:  # backlog: show the newest part, say what was skipped
            size = 0
            start = len(entries)
            while start > 0 and size + len(entries[start - 1].text) + 24 <= budget:
                start -= 1
                size += len(entries[start].text) + 24
            lines.append(notice_html(f"{start} lines skipped to keep up (see the log files)"))
        for e in entries[start:]:
            if _matches(e, self._needle, self._ranks):
                lines.append(log_line_html(e))
        self._seq = entries[-1].seq
        self._append(lines)
        folded = self.model.repeats_folded
        same = "" if not folded or self._label else (
            f" · {folded} Trainer log line(s) other ranks repeated shown once"
        )  # fmt: skip
        self.log_status.value = f"{self.model.line_count} line(s){same}"

    @property
    def _ranks(self) -> RankFilter | None:
        """The rank filter while every rank is selected (a big job's), else None."""
        return None if self._label else self.rank_filter

    def _reset_logs(self) -> None:
        self._chunks = []
        self._chunk_lines = []
        self._chunk_size = 0
        self.log_box.children = ()
        buf = self.model.logs if not self._label else self.model.rank_logs.get(self._label, ())
        tail: list[str] = []
        size = 0
        for e in reversed(buf):
            if not _matches(e, self._needle, self._ranks):
                continue
            line = log_line_html(e)
            if size + len(line) > self.max_flush_bytes:
                break
            tail.append(line)
            size += len(line)
        tail.reverse()
        self._seq = buf[-1].seq if buf else 0
        self._append(tail)

    def _append(self, lines: list[str]) -> None:
        if not lines:
            return
        for line in lines:
            if not self._chunks or self._chunk_size + len(line) > self.chunk_bytes:
                if self._chunks:
                    self._render_chunk()  # freeze the full chunk
                self._new_chunk()
            self._chunk_lines.append(line)
            self._chunk_size += len(line) + 1
        self._render_chunk()

    def _new_chunk(self) -> None:
        chunk = self._w.HTML(layout=self._w.Layout(flex="0 0 auto"))
        self._chunks.insert(0, chunk)
        del self._chunks[self.max_chunks :]
        self._chunk_lines = []
        self._chunk_size = 0
        self.log_box.children = tuple(self._chunks)

    def _render_chunk(self) -> None:
        body = "\n".join(self._chunk_lines)
        self._chunks[0].value = (
            '<pre style="margin:0;font-size:12px;line-height:1.3;white-space:pre-wrap">'
            f"{body}</pre>"
        )

    def log_text(self) -> str:
        """The plain text currently in the log pane, oldest first (what a user reads)."""
        out = []
        for chunk in reversed(self._chunks):
            body = chunk.value.split(">", 1)[1].rsplit("</pre>", 1)[0]
            out.append(strip_tags(body))
        return "\n".join(out)

    # -- plots --------------------------------------------------------------------------
    def _update_plots(self, now: float) -> None:
        self._update_summary()
        dirty = self._dirty_series()
        grids = [asdict(g) for g in self.model.gpu_grids()]  # from 8 GPUs up (.glance)
        if not dirty and grids == self._grids:
            return
        per_trace = max(100, min(self.plot_points, self.max_plot_points // max(1, len(dirty))))
        if self._plot is None:
            figure = self._figure.ready(wait=self._closing)
            if figure is None:
                return  # still being made (see show): the next redraw draws every point
            self._plot = figure
            self.plots.children = (self._plot.fig,)
        plot = self._plot
        for key, t in dirty:
            plot.panel(key.id, key.title, key.x_title)
            xs, ys = t.series.points(per_trace)
            plot.set_trace(key.id, t.who, t.label, t.colour, xs, ys)
            self._pushed[(key.id, t.who)] = (t.series.revision, t.series.count)
        self._update_markers()
        if grids != self._grids:
            self._grids = grids
            plot.set_heatmaps(grids)
        plot.draw()  # one message: the browser draws it in its next frame
        drawn: dict[str, int] = {}
        for (panel, _who), (_rev, n) in self._pushed.items():
            name = PanelKey.parse(panel).field
            drawn[name] = drawn.get(name, 0) + n
        self.plot_history.append((now, drawn))

    def _update_markers(self) -> None:
        """The job's restarts as lines in the metric panels drawn (sent with the next draw)."""
        if self._plot is None:
            return
        markers = [(m.x, m.text) for m in self.model.markers]
        metric_panels = [p for p in self._plot.panels if PanelKey.parse(p).kind == "metric"]
        if (markers, metric_panels) == self._markers:
            return
        self._markers = (markers, metric_panels)  # a panel added later gets them too
        self._plot.set_markers({p: markers for p in metric_panels})

    def _update_summary(self) -> None:
        """Metrics reported once (a run's closing numbers): values in a row, not charts."""
        if self.model.record_count == self._summary_seen:
            return
        self._summary_seen = self.model.record_count
        values = summary_values(self.model)
        self.summary.value = "".join(
            f'<span style="margin-right:16px;font-size:12px" title="rank {v.rank}, at {v.x:g}">'
            f"<b>{html.escape(v.name)}</b> {fmt_value(v.value)}</span>"
            for v in values
        )

    def _dirty_series(self) -> list[tuple[PanelKey, TraceView]]:
        m = self.model
        if self._label.startswith("rank"):
            shown = {int(self._label[4:])}
        else:
            shown = set(sorted({r for r, _ in m.metrics})[: self.max_plot_ranks])
        out: list[tuple[PanelKey, TraceView]] = []
        for panel in plot_panels(m, ranks=shown):
            for t in panel.traces:
                pushed = self._pushed.get((panel.key.id, t.who))
                if pushed is None or pushed[0] != t.series.revision:
                    out.append((panel.key, t))
        return out

    def traces(self, name: str) -> list[Any]:
        """Plotted traces of metric ``name`` or GPU field ``gpu:util`` (what the user sees)."""
        if self._plot is None:
            return []
        traces: list[Any] = self._plot.traces(PanelKey.parse(name).id)
        return traces

    def heatmaps(self) -> list[dict[str, Any]]:
        """The GPU heatmaps drawn (from 8 GPUs up), one per field."""
        return self._plot.heatmaps if self._plot is not None else []


# ---------------------------------------------------------------------------------------
def _panel_hint(button_class: str, name_class: str) -> Any:
    """What the panel button says where the side panel is not loaded (:mod:`.panelhint`)."""
    from .panelhint import PanelHint

    return PanelHint(button_class=button_class, name_class=name_class)


def make_view(
    model: MonitorModel,
    prefer_widgets: bool = True,
    *,
    on_cancel: Callback | None = None,
    on_open_panel: Callback | None = None,
    out: IO[str] | None = None,
) -> View:
    """A :class:`MonitorView` when asked for and possible, else a :class:`TextView`."""
    if prefer_widgets and widgets_available():
        return MonitorView(model, on_cancel=on_cancel, on_open_panel=on_open_panel)
    return TextView(model, out)
