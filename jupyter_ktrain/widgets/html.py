"""The widget's HTML pieces: log lines in their rank's colour, the view's own notices, the
replica table, and the text a user reads back of them. Pure strings: no widget imports.
"""

from __future__ import annotations

import html

from ..monitor.logbook import LogEntry
from ..monitor.model import MonitorModel
from ..monitor.viewmodel import rank_colour

__all__ = ["log_line_html", "notice_html", "replica_table", "strip_tags"]


def log_line_html(e: LogEntry) -> str:
    """``[rank3] text``, its label in its rank's colour."""
    return f'<span style="color:{rank_colour(e.rank)}">[{e.label}]</span> {html.escape(e.text)}'


def notice_html(text: str) -> str:
    """``… text`` in grey: what the view says of its own lines (skipped, left the view)."""
    return f'<span style="color:#888">… {html.escape(text)}</span>'


def strip_tags(text: str) -> str:
    """The text a user reads of an HTML fragment."""
    out: list[str] = []
    inside = False
    for ch in text:
        if ch == "<":
            inside = True
        elif ch == ">":
            inside = False
        elif not inside:
            out.append(ch)
    return html.unescape("".join(out))


def replica_table(model: MonitorModel) -> str:
    """The replica table as HTML (name, phase, restarts, node, last event)."""
    if not model.replicas:
        return ""
    head = "".join(
        f'<th style="text-align:left;padding:0 12px 0 0">{h}</th>'
        for h in ("replica", "phase", "restarts", "node", "last event")
    )
    rows = []
    for r in model.replicas:
        cells = (r.name, r.phase, str(r.restarts), r.node, r.last_event)
        tds = "".join(f'<td style="padding:0 12px 0 0">{html.escape(c)}</td>' for c in cells)
        rows.append(f"<tr>{tds}</tr>")
    return f'<table style="font-size:12px"><tr>{head}</tr>{"".join(rows)}</table>'
