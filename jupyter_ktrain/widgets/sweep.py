"""The sweep's view in its cell: one live widget drawn from the sweep's record (the job
store's, :mod:`jupyter_ktrain.sweep.record`) each time the sweep writes it: a header (name,
state, n of N trials done, the best so far with its values), the trials' table (each value,
state, objective so far, job and run; the best row marked; a failed or pruned trial's reason)
and one chart of every trial's objective over steps (the monitor's small SVG chart widget).
The lines the sweep says while it runs go into a log under the table, folded, its title the
last line.

Cheap to redraw: the table is one HTML string, sent only when it changed; the chart only
when a curve changed, in one message (the browser draws it in its next frame).
"""

from __future__ import annotations

import html

from ..sweep.record import RUNNING, SweepRecord
from ..sweep.view import CurveView, SweepView, sweep_view
from .plots import FigureAside, PanelFigure

__all__ = ["SWEEP_BUTTON_CLASS", "SweepWidget", "header_html", "table_html"]

SWEEP_BUTTON_CLASS = "ktrain-open-sweep"  # what the JupyterLab extension's click listener reads

PANEL = "objective"
LOG_LINES = 500  # the most lines the folded log keeps


def header_html(view: SweepView) -> str:
    """The header: the sweep's state in its colour, then what :attr:`SweepView.header` says."""
    return (
        f'<div class="ktrain-SweepHeader" data-state="{html.escape(view.state)}">'
        f'<b style="color:{view.state_colour}">●</b> {html.escape(view.header)}</div>'
    )


def table_html(view: SweepView) -> str:
    """The trials' table: one row per trial (``data-number``, ``data-state``; the best row's
    class ``ktrain-mod-best``), a failed or pruned trial's reason in its last cell."""
    pad = "padding:1px 10px 1px 0;text-align:left"
    heads = ["trial", *view.names, "state", f"{view.objective} so far", "job", ""]
    head = "".join(f'<th style="{pad}">{html.escape(h)}</th>' for h in heads)
    rows = []
    for r in view.rows:
        mark = "★ " if r.best else ""
        tds = [
            f'<td style="{pad}"><span style="color:{r.colour}">■</span> {mark}{r.number}</td>',
            *(f'<td style="{pad}">{html.escape(v)}</td>' for v in r.params),
            f'<td class="ktrain-SweepState" style="{pad};color:{r.state_colour}">'
            f"{html.escape(r.state)}</td>",
            f'<td class="ktrain-SweepObjective" style="{pad}">{html.escape(r.objective)}</td>',
            f'<td style="{pad}">{html.escape(r.where)}</td>',
            f'<td class="ktrain-SweepReason" style="{pad};color:#b35900">'
            f"{html.escape(r.reason)}</td>",
        ]
        best = ' class="ktrain-SweepRow ktrain-mod-best" style="font-weight:bold"'
        attrs = best if r.best else ' class="ktrain-SweepRow"'
        rows.append(
            f'<tr{attrs} data-number="{r.number}" data-state="{html.escape(r.state)}">'
            f"{''.join(tds)}</tr>"
        )
    return (
        f'<table class="ktrain-SweepTable" style="font-size:12px;border-collapse:collapse">'
        f"<tr>{head}</tr>{''.join(rows)}</table>"
    )


class SweepWidget:
    """Sweep ``name``'s live view (see the module docstring); ``widget`` is its VBox.
    ``update`` and ``say`` from the thread that runs the sweep. Its "Open in side panel"
    button needs nothing of the kernel (busy while the sweep runs): it carries the DOM classes
    ``ktrain-open-sweep`` and ``ktrain-sweep-NAME``, and the JupyterLab extension's click
    listener opens the sweep's tab (as the job monitor's, see
    :func:`~.monitor.open_in_panel`)."""

    def __init__(self, name: str) -> None:
        import ipywidgets as w

        from .panelhint import PanelHint  # anywidget, an extra: imported once a widget is made

        self.header = w.HTML()
        self.panel_button = w.Button(
            description="Open in side panel",
            icon="external-link",
            tooltip="Show this sweep in a tab of JupyterLab's ktrain panel",
            layout=w.Layout(width="auto", min_width="max-content"),
        )
        self.panel_button.add_class(SWEEP_BUTTON_CLASS)
        self.panel_button.add_class(f"ktrain-sweep-{name}")
        self.table = w.HTML()
        self.chart = w.Box(layout=w.Layout(display="block", width="100%"))
        self.log = w.HTML()
        self.log_box = w.Accordion(children=[self.log], selected_index=None)
        top = w.HBox([self.header, self.panel_button])
        hint = PanelHint(button_class=SWEEP_BUTTON_CLASS, name_class=f"ktrain-sweep-{name}")
        self.widget = w.VBox([top, hint, self.table, self.log_box, self.chart])
        self.widget.add_class("ktrain-SweepWidget")
        self.view: SweepView | None = None
        self.lines: list[str] = []
        self._figure = FigureAside()
        self._plot: PanelFigure | None = None
        self._drawn: dict[int, CurveView] = {}

    @property
    def live(self) -> bool:
        """Whether the sweep is still running (its lines go into the log)."""
        return self.view is None or self.view.state == RUNNING

    def show(self) -> None:
        from IPython import display

        display.display(self.widget)  # type: ignore[no-untyped-call]
        self._figure.start()

    def update(self, record: SweepRecord) -> None:
        """Draw the sweep as ``record`` says it stands."""
        view = sweep_view(record)
        self.view = view
        header, table = header_html(view), table_html(view)
        if self.header.value != header:
            self.header.value = header
        if self.table.value != table:
            self.table.value = table
        self._draw(view, wait=view.state != RUNNING)

    def say(self, text: str) -> None:
        """A line the sweep says: into the folded log, its title the last line."""
        self.lines = [*self.lines, *text.rstrip("\n").split("\n")][-LOG_LINES:]
        self.log.value = (
            '<pre class="ktrain-SweepLog" style="font-size:11px;margin:0">'
            f"{html.escape(chr(10).join(self.lines))}</pre>"
        )
        last = self.lines[-1] if self.lines else ""
        self.log_box.set_title(0, f"log ({len(self.lines)} lines): {last[:120]}")

    def _draw(self, view: SweepView, wait: bool) -> None:
        changed = [c for c in view.curves if self._drawn.get(c.trial) != c]
        if not changed:
            return
        if self._plot is None:
            figure = self._figure.ready(wait=wait)
            if figure is None:
                return  # still being made: the next update draws every curve
            self._plot = figure
            self.chart.children = (figure.fig,)
        plot = self._plot
        plot.panel(PANEL, view.metric, "step")
        for c in changed:
            plot.set_trace(PANEL, c.trial, c.label, c.colour, c.x, c.y)
            self._drawn[c.trial] = c
        plot.draw()
