"""The one plain-text view of a running job: terminals, nbclient, frontends without widgets.

:class:`TextView` reads a :class:`~jupyter_ktrain.monitor.model.MonitorModel` (the same model
the widget reads) and prints every rank's lines with the protocol's prefix (``[rank3]: ...``),
state changes, the NCCL transport, warnings (once each) and now and then the latest metrics.
``failure_summary`` is what a failed job ends with. No widget imports here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from ..jobs import CANCELLED, FAILED
from ..pod.progress import fmt_duration, progress_text
from ..pod.protocol import METRIC, metric_values
from ..words import ended_by_user, run_words
from .cell_error import job_error
from .logbook import LogEntry
from .model import MonitorModel
from .viewmodel import NOTICES, fmt_value, summary_values

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import JobStatus

__all__ = [
    "TextView",
    "failure_summary",
    "header_text",
    "text_line",
]


def _shape(model: MonitorModel) -> str:
    shape = model.header.shape
    if shape.gpus_per_node:
        return f"{shape.nodes} node(s) × {shape.gpus_per_node} GPU(s)"
    return f"{shape.nodes} node(s) × {shape.procs_per_node} proc(s)"


def _digest(digest: str | None) -> str:
    if not digest:
        return ""
    algo, _, hexpart = digest.partition(":")
    return f"{algo}:{hexpart[:12]}" if hexpart else digest[:19]


def header_text(model: MonitorModel, now: float) -> str:
    """``mnist · PyTorchJob on local · Running 1m 05s · 42% (420/1000) · 1m 30s left · 2
    node(s) × 2 proc(s) · sha256:…`` (progress once the job reports a ``total``): the
    :func:`header_parts` in one line."""
    head, details = header_parts(model, now)
    return f"{head} · {details}" if details else head


def header_parts(model: MonitorModel, now: float) -> tuple[str, str]:
    """The header's line that matters (the job, its kind and backend, its state and clock, its
    progress) and its details (its shape, image, transport, the state's message): the widget
    shows the first on one line and the details under it."""
    h = model.header
    parts = [
        h.name,
        f"{h.shape.kind} on {h.backend}",
        f"{h.state} {fmt_duration(int(h.elapsed(now)))}",
    ]
    if h.run is not None:
        parts.insert(1, run_words(h.run))  # a warm job's run: said, not only in a tooltip
    if model.progress is not None:
        parts.append(progress_text(model.progress, now, h.finished, model.restarting))
    details = [_shape(model)]
    if h.image_digest:
        details.append(_digest(h.image_digest))
    if model.transport is not None:
        details.append(model.transport.describe())
    if h.message:
        details.append(h.message)
    return " · ".join(parts), " · ".join(details)


def text_line(entry: LogEntry) -> str:
    """A log entry as text: ``[rank3]: text`` (the protocol's prefix), ``[node@1] text``."""
    if entry.rank is not None:
        return f"[rank{entry.rank}]: {entry.text}"
    return f"[{entry.label}] {entry.text}"


class TextView:
    """Readable text for nbclient, terminals and frontends without widgets.

    Prints ``[rank3]: text`` lines, state changes, alerts (once each) and, at most every
    ``metric_every`` seconds, the latest metrics; ``close`` prints the final state line. Each
    ``update`` writes one batch of at most ``max_bytes`` bytes (the rest is counted, and stays
    in the log files).
    """

    def __init__(
        self,
        model: MonitorModel,
        out: IO[str] | None = None,
        *,
        max_bytes: int = 64_000,
        metric_every: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model = model
        self.out = out if out is not None else sys.stdout
        self.max_bytes = max_bytes
        self.metric_every = metric_every
        self.clock = clock
        self._seq = 0
        self._state: tuple[str, str] | None = None
        self._alerted: set[tuple[str, str]] = set()
        self._transport: str | None = None
        self._metric_at = 0.0
        self._metric_seen: int | None = None
        self._closed = False

    def show(self) -> None:
        now = self.clock()
        self.out.write(f"[ktrain] {header_text(self.model, now)}\n")
        self._state = (self.model.header.state, self.model.header.message)
        self.out.flush()

    def update(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        chunks: list[str] = []
        h = self.model.header
        if (h.state, h.message) != self._state:
            self._state = (h.state, h.message)
            chunks.append(
                f"[ktrain] {h.name}: {h.state}" + (f" ({h.message})" if h.message else "")
            )
        transport = self.model.transport
        if transport is not None and transport.describe() != self._transport:
            self._transport = transport.describe()
            chunks.append(f"[ktrain] NCCL transport: {self._transport}")
        for alert in self.model.alerts():
            if (alert.code, alert.key) not in self._alerted:
                self._alerted.add((alert.code, alert.key))
                warning = "" if alert.code in NOTICES else "warning: "
                chunks.append(f"[ktrain] {warning}{alert.message}")
        chunks.extend(self._new_lines())
        metric = self._metrics(now)
        if metric:
            chunks.append(metric)
        if chunks:
            self.out.write("\n".join(chunks) + "\n")
            self.out.flush()

    def _new_lines(self) -> list[str]:
        lines: list[str] = []
        size = 0
        entries = list(self.model.lines_after(self._seq))
        left = self.model.left_after(self._seq) if self._seq else 0
        if entries and left:
            lines.append("[ktrain] … older lines left the view; they are in the log files")
        for i, e in enumerate(entries):
            line = text_line(e)
            size += len(line) + 1
            if size > self.max_bytes:
                rest = len(entries) - i
                lines.append(f"[ktrain] … {rest} lines not shown (rate limit; see the logs)")
                break
            lines.append(line)
        if entries:
            self._seq = entries[-1].seq
        return lines

    def _metrics(self, now: float) -> str:
        rec = self.model.last_records.get(METRIC)
        if rec is None or self.model.record_count == self._metric_seen:
            return ""
        if now - self._metric_at < self.metric_every:
            return ""
        self._metric_at, self._metric_seen = now, self.model.record_count
        values = ", ".join(f"{k} {fmt_value(v)}" for k, v in metric_values(rec).items())
        step = f" step {rec['step']}" if "step" in rec else ""
        progress = self.model.progress
        done = f" · {progress.describe(now)}" if progress is not None else ""
        return f"[ktrain] metrics (rank {rec.get('rank')}{step}): {values}{done}"

    def close(self, now: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        now = self.clock() if now is None else now
        self.update(now)
        h = self.model.header
        once = summary_values(self.model)
        if once:  # a run's closing numbers (Trainer's train_runtime...), reported once
            values = " · ".join(f"{v.name} {fmt_value(v.value)}" for v in once)
            self.out.write(f"[ktrain] reported once: {values}\n")
        tail = f" ({h.message})" if h.message else ""
        ran = fmt_duration(int(h.elapsed(now)))  # whole seconds: a clock does not run ahead
        self.out.write(f"[ktrain] {h.name} {h.state} after {ran}{tail}\n")
        self.out.flush()


def failure_summary(job: Job, status: JobStatus, tail: int = 20) -> str:
    """What the side panel's failure box says of a failed or cancelled job: the text of the
    error its cell raised (:func:`.cell_error.job_error`: the first failing rank, how it ended,
    its last lines), so the two cannot disagree; "" for a job that did not fail."""
    if ended_by_user(status) or status.state not in (FAILED, CANCELLED):
        return ""  # a warm job its user ended: its own end, not a failure
    return f"{job_error(job, status, tail)}\n"
