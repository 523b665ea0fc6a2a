"""Progress display for pushes: ``callback(done_bytes, total_bytes, what)``.

:class:`TextProgress` draws one carriage-return bar on a terminal stream; :class:`WidgetProgress`
an ipywidgets ``FloatProgress`` + label (ipywidgets imported only when it is made). Both
throttle redraws (default 10 per second) because notebook output is rate limited and every
widget update is a message; the final update is always drawn. :func:`auto_progress` picks the
widget inside a Jupyter kernel with ipywidgets, else the text bar.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["TextProgress", "WidgetProgress", "auto_progress", "human_bytes"]


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KB"`` (powers of 1024, one decimal)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"  # pragma: no cover


class _Throttled:
    def __init__(self, min_interval: float, clock: Callable[[], float]):
        self.min_interval, self.clock, self._last = min_interval, clock, -1e9

    def __call__(self, done: int, total: int, what: str) -> None:
        now = self.clock()
        if done < total and now - self._last < self.min_interval:
            return
        self._last = now
        self.draw(done, total, what)

    def draw(self, done: int, total: int, what: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class TextProgress(_Throttled):
    """``[#####.....]  42% 1.2 MB/2.9 MB layer sha256:ab12`` on one rewritten line."""

    def __init__(
        self,
        stream: TextIO | None = None,
        width: int = 30,
        min_interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(min_interval, clock)
        self.stream = stream if stream is not None else sys.stderr
        self.width = width

    def draw(self, done: int, total: int, what: str) -> None:
        frac = done / total if total else 1.0
        fill = int(frac * self.width)
        bar = "#" * fill + "." * (self.width - fill)
        line = f"\r[{bar}] {frac:4.0%} {human_bytes(done)}/{human_bytes(total)} {what}"
        self.stream.write(line + ("\n" if done >= total else ""))
        self.stream.flush()


class WidgetProgress(_Throttled):
    """An ipywidgets bar; ``display()`` it once (done by :func:`auto_progress`)."""

    def __init__(self, min_interval: float = 0.1, clock: Callable[[], float] = time.monotonic):
        super().__init__(min_interval, clock)
        import ipywidgets

        self.bar = ipywidgets.FloatProgress(value=0.0, min=0.0, max=1.0, description="push")
        self.label = ipywidgets.Label(value="")
        self.widget: Any = ipywidgets.HBox([self.bar, self.label])

    def draw(self, done: int, total: int, what: str) -> None:
        self.bar.value = done / total if total else 1.0
        self.bar.bar_style = "success" if done >= total else ""
        self.label.value = f"{human_bytes(done)}/{human_bytes(total)} {what}"


def _in_kernel() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    ip = shell.get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


def auto_progress() -> Callable[[int, int, str], None]:
    """Widget bar (displayed now) in a Jupyter kernel with ipywidgets, else a text bar."""
    if _in_kernel():
        try:
            bar = WidgetProgress()
        except ImportError:
            return TextProgress(sys.stdout)
        from IPython.display import display

        display(bar.widget)  # type: ignore[no-untyped-call]
        return bar
    return TextProgress()
