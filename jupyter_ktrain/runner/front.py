"""The port every front end fills for the runner: how it speaks, shows a job, and takes the
names a job bound. The runner calls these and nothing else of a front end.

- :class:`Front`: the protocol (the magic's notebook front, ``ktrain.run``'s, the console
  script's);
- :class:`TextFront`: plain text on a stream, for scripts and terminals (``python train.py``,
  papermill without widgets, ``ktrain attach``), with :func:`shell_words` there.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol, cast

from ..monitor.text import TextView

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import View
    from ..monitor.model import MonitorModel

__all__ = ["Front", "TextFront", "in_kernel", "ipython_shell", "shell_words"]


class Front(Protocol):
    """A front end as the runner sees it. ``say`` prints one message (a line or several);
    ``view`` makes the view a followed job is shown in; ``bind`` gets the names rank 0 bound
    when a followed job succeeded (the magic sets them in the kernel)."""

    def say(self, text: str) -> None: ...
    def view(self, job: Job, model: MonitorModel) -> View: ...
    def bind(self, outputs: Mapping[str, Any]) -> None: ...


class TextFront:
    """Text on ``out`` (default: stdout as it is when written to); ``reword`` rewrites each
    message for where it is read (the console script says ``ktrain logs``, not ``%ktrain
    logs``)."""

    def __init__(self, out: IO[str] | None = None, reword: Callable[[str], str] = str) -> None:
        self._out = out
        self.reword = reword

    @property
    def out(self) -> IO[str]:
        return self._out if self._out is not None else sys.stdout

    def say(self, text: str) -> None:
        text = self.reword(text)
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def view(self, job: Job, model: MonitorModel) -> View:
        return TextView(model, cast(IO[str], _Reworded(self)))

    def bind(self, outputs: Mapping[str, Any]) -> None:
        return None


class _Reworded(io.TextIOBase):
    """The text view's stream: the front's, each write reworded as the front's messages are."""

    def __init__(self, front: TextFront) -> None:
        self.front = front

    def write(self, text: str) -> int:
        return self.front.out.write(self.front.reword(text))

    def flush(self) -> None:
        self.front.out.flush()


def shell_words(text: str) -> str:
    """Messages are written for the notebook (``%ktrain list``); a shell user types
    ``ktrain list``, and sets options with ``ktrain config key=value``."""
    return text.replace("%%ktrain --help", "ktrain render --help").replace("%ktrain ", "ktrain ")


def ipython_shell() -> Any:
    """The running IPython shell, or None (IPython is not imported to find out)."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def in_kernel() -> bool:
    """A Jupyter kernel (a widget or a figure shows there), not a terminal IPython or a
    plain ``python``."""
    return getattr(ipython_shell(), "kernel", None) is not None
