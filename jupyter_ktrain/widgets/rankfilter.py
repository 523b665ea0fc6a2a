"""The widget's rank filter for a big job's log pane (:mod:`jupyter_ktrain.monitor.glance`).

From 16 ranks up the pane starts with rank 0 and every rank that printed a warning or an
error (each new one joins while the user has not chosen; they head the choice, in view); a
multiple choice of every rank that printed a line reaches the others' lines, and the rank
selector beside it says how many are chosen, not "all ranks". Lines of no rank (the agent's, the
launcher's) always show. Below 16 ranks it stays hidden and shows every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..monitor.logbook import LogEntry
from ..monitor.model import MonitorModel

__all__ = ["RankFilter"]


class RankFilter:
    """``widget``: the multiple choice (hidden until the job has 16 ranks); ``on_change``
    runs when the user changes it (from the widget's thread: a flag only, see
    :class:`~jupyter_ktrain.widgets.monitor.MonitorView`)."""

    def __init__(self, w: Any, on_change: Callable[[Any], None]) -> None:
        self.widget = w.SelectMultiple(
            options=[], rows=6, description="Ranks", layout=w.Layout(display="none")
        )
        self.chosen: frozenset[int] | None = None  # None: every rank
        self.touched = False  # the user chose: new warning ranks no longer join
        self._setting = False
        self._said: tuple[Any, ...] = ()
        self._on_change = on_change
        self.widget.observe(self._chose, names="value")

    def _chose(self, change: Any) -> None:
        if self._setting:
            return
        self.touched = True
        self._on_change(change)

    def update(self, model: MonitorModel) -> bool:
        """Options and, until the user chose, the starting ranks from ``model``; whether the
        ranks shown changed (the pane is drawn again then)."""
        start = model.start_ranks()
        if start is None:
            return False
        flagged = model.flagged
        # the ranks it starts with (rank 0, those that printed a warning or an error) first:
        # in view at the top of the box, not below its rows
        first = set(start) | set(flagged)
        options = tuple(
            (f"rank {r}" + (f" ({flagged[r]})" if r in flagged else ""), r)
            for r in sorted(model.ranks | set(start), key=lambda r: (r not in first, r))
        )
        value = tuple(self.widget.value) if self.touched else start
        if (options, value) != self._said:
            self._setting = True
            try:
                self.widget.options = options
                self.widget.value = value
                self.widget.layout.display = ""
            finally:
                self._setting = False
            self._said = (options, value)
        chosen = frozenset(value)
        changed, self.chosen = chosen != self.chosen, chosen
        return changed

    def label(self) -> str:
        """What the rank selector's "every rank" choice shows while this filter is in use:
        ``3 chosen ranks`` (``all ranks`` while it is hidden or every rank is chosen)."""
        chosen, every = self.chosen, len(self.widget.options)
        if chosen is None or len(chosen) >= every:
            return "all ranks"
        return f"{len(chosen)} chosen rank" + ("" if len(chosen) == 1 else "s")

    def shows(self, entry: LogEntry) -> bool:
        """Whether ``entry`` is in the pane: a chosen rank's, or of no rank."""
        return self.chosen is None or entry.rank is None or entry.rank in self.chosen
