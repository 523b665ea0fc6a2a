"""How a log line is shown, the same in every view (the cell's text, the widget, the panel).

- :class:`RepeatFold`: a line that several ranks print alike is shown once in the all-ranks
  view. The Transformers Trainer's log dict (``{'loss': 0.52, 'grad_norm': ...}``) is printed
  by every node's local process zero, so ranks 0, nproc, 2*nproc... print the same (globally
  reduced) record; each rank's own view keeps its copy.
- :func:`shown_ranks`: which rank such a line is shown under: the lowest of the ranks that
  printed it (rank 0's copy, in every view), wherever the first copy came in a read.
- :func:`shown_text`: a line with carriage returns (tqdm's progress bars: ``Writing model
  shards: 10%\\r... 100%``) is what a terminal would show, its last frame: one line under its
  ``[rank0]`` label, not frames that a browser breaks into lines of no rank.

Pure, stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["REPEAT_WINDOW_S", "RepeatFold", "shown_ranks", "shown_text"]

_TRAINER_LOG = re.compile(
    r"^\{'(loss|eval_\w+|train_\w+|learning_rate|grad_norm|epoch|total_flos)'"
)
REPEAT_WINDOW_S = 10.0
_KEEP = 256  # lines remembered before old ones are forgotten


def shown_text(text: str) -> str:
    """``text`` as a terminal shows it: after its last carriage return (a progress bar's
    last frame; a trailing one is ignored)."""
    if "\r" not in text:
        return text
    frames = [f for f in text.split("\r") if f.strip()]
    return frames[-1] if frames else ""


def shown_ranks(
    lines: Sequence[tuple[int | None, str, float]], window_s: float = REPEAT_WINDOW_S
) -> list[int | None]:
    """The rank each of one read's lines ``(rank, text, time)`` (in the order shown) is
    labelled with in the all-ranks view: its own, but a Trainer log line several ranks printed
    alike within ``window_s`` is shown (once: :class:`RepeatFold`) under the lowest of them,
    the job's rank 0 as the widget shows it, even where another node's copy came first."""
    out = [rank for rank, _, _ in lines]
    first: dict[str, int] = {}  # text -> the index of the copy shown
    for i, (rank, text, t) in enumerate(lines):
        if rank is None or not _TRAINER_LOG.match(text):
            continue
        j = first.get(text)
        if j is None or abs(t - lines[j][2]) > window_s:
            first[text] = i
        elif (shown := out[j]) is not None and rank < shown:
            out[j] = rank
    return out


class RepeatFold:
    """Decides, line by line, whether a line is a repeat another rank printed just before
    (within :data:`REPEAT_WINDOW_S` seconds). Feed every line of the all-ranks view in
    order; not thread-safe."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S) -> None:
        self.window_s = window_s
        self._printed: dict[str, tuple[int, float]] = {}  # line -> (rank, when)

    def repeat(self, rank: int | None, text: str, t: float) -> bool:
        """True when rank ``rank``'s line ``text`` at time ``t`` is another rank's repeat
        (then it is not shown in the all-ranks view)."""
        if rank is None or not _TRAINER_LOG.match(text):
            return False
        first = self._printed.get(text)
        if first is not None and first[0] != rank and abs(t - first[1]) <= self.window_s:
            return True
        if len(self._printed) > _KEEP:
            self._printed = {k: v for k, v in self._printed.items() if t - v[1] <= 60}
        self._printed[text] = (rank, t)
        return False
