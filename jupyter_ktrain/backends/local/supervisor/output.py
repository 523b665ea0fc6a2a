"""What a local job's supervisor reads from its nodes' output (:class:`NodeOutput`, the part of
:class:`~.nodes.Supervisor` that copies it): each node's lines to ``node-K.log`` with their
arrival times (``node-K.times``), each rank's own lines to ``rank-R.log``, and from the records
and torchrun's failure report, the ranks' exit codes, the job's first failure, its first bug
and its progress; each rank's progress goes to the job's hang watch (:mod:`.hangwatch`)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from ....failures import TorchrunReport, WorkerExit
from ....jobs import CANCELLED_BY_USER
from ....pod.exits import is_bug
from ....pod.progress import JobProgress
from ....pod.protocol import Exit, Metric, Resume, format_agent_line, parse_line
from ..joblog import JobLog, copy_error_text
from ..request import LocalRequest
from ..state import LocalState
from .causes import Bug, first_cause, outweighs
from .hangwatch import JobHangs

CANCEL_LINE = (format_agent_line(CANCELLED_BY_USER) + "\n").encode()
PROGRESS_SAVE_S = 0.25  # the views show this progress (one truth): a few times a second


class NodeOutput:
    """The output half of a supervisor: the state it keeps is the supervisor's own (set in its
    ``__init__``); :meth:`save` writes it."""

    dir: Path
    plan: LocalRequest
    lock: threading.Lock
    rank_files: dict[int, JobLog]
    reports: dict[int, TorchrunReport]
    exit_codes: dict[int, int]
    first_failure: tuple[float, int] | None
    bug: Bug | None
    cancelled: bool
    copy_error: str | None
    progress: JobProgress
    progress_saved: float
    state: LocalState
    hangs: JobHangs

    def save(self, **changes: Any) -> None:
        raise NotImplementedError

    # -- output ---------------------------------------------------------------------------
    def _rank_file(self, rank: int) -> JobLog:
        if rank not in self.rank_files:
            self.rank_files[rank] = JobLog(self.dir / f"rank-{rank}.log")
        return self.rank_files[rank]

    def _pump(self, node: int, stream: IO[bytes]) -> None:
        try:
            self._copy(node, stream)
        except Exception as exc:  # any failure to keep the output ends the job (never a hang)
            self._on_copy_error(exc)
            for _ in iter(stream.readline, b""):  # keep reading: no process blocks on a pipe
                pass

    def _copy(self, node: int, stream: IO[bytes]) -> None:
        folded = False
        node_log = JobLog(self.dir / f"node-{node}.log")
        times = JobLog(self.dir / f"node-{node}.times")
        report = self.reports.setdefault(node, TorchrunReport())

        def write(data: bytes) -> None:
            # the arrival time of each line, like a pod log's timestamps: merging the nodes'
            # logs by time (the side panel's "all ranks") needs it
            times.write(b"%.6f\n" % time.time())
            node_log.write(data if data.endswith(b"\n") else data + b"\n")

        try:
            for raw in iter(stream.readline, b""):
                if self.copy_error is not None:
                    continue  # the job is being stopped; its output can no longer be kept
                line = parse_line(raw.decode("utf-8", "replace").rstrip("\n"))
                if self.cancelled and line.source == "node":
                    # torchrun's teardown (its SignalException traceback) after a cancel says
                    # nothing the user does not know: one line instead
                    if not folded:
                        folded = True
                        write(CANCEL_LINE)
                    continue
                write(raw)
                self._on_line(line, report)
        finally:
            node_log.close()
            times.close()

    def _on_line(self, line: Any, report: TorchrunReport) -> None:
        if line.source == "node":
            ended = report.feed(line.text)
            if ended is not None:
                self._on_worker_exit(ended)
            return
        if line.rank is None:
            return
        step = line.record.get("step") if line.record is not None else None
        self.hangs.heard(line.rank, step if type(step) is int else None, time.time())
        if line.record is None:
            with self.lock:
                self._rank_file(line.rank).write(line.text.encode() + b"\n")
        else:
            record = line.typed
            if isinstance(record, Exit):
                self._on_rank_exit(line.rank, record.code)
            elif isinstance(record, (Metric, Resume)):  # a resume measures the rate anew
                self._on_progress(line.rank, record)

    def _on_progress(self, rank: int, record: Metric | Resume) -> None:
        with self.lock:
            now = time.time()
            p = self.progress.feed(rank, record, now)
            if p is None:
                return
            if now - self.progress_saved < PROGRESS_SAVE_S and not p.done:
                return
            self.progress_saved = now
            self.state = replace(self.state, progress=p)
        self.save()

    def _on_rank_exit(self, rank: int, code: int) -> None:
        """A rank's own exit record (:func:`.causes.outweighs`: whether it is the cause)."""
        with self.lock:
            self.exit_codes[rank] = code
            if outweighs(code, self.first_failure, self.exit_codes, time.time()):
                self.first_failure = (time.time(), rank)
            if is_bug(code) and self.bug is None:
                self.bug = Bug(time.monotonic(), rank // self.plan.nproc, code, rank)
        self.save()

    def _on_worker_exit(self, ended: WorkerExit, ours: bool = False) -> None:
        """An entry of torchrun's failure report: the only word on a rank a signal killed
        (``ours``: a rank the supervisor killed after a bug, which is never the cause)."""
        with self.lock:
            self.exit_codes.setdefault(ended.rank, ended.code)  # a rank's own record wins
            cause = first_cause(ended, self.first_failure, self.exit_codes, time.time())
            if cause and not ours:
                self.first_failure = (time.time(), ended.rank)
        self.save()

    def _on_copy_error(self, exc: BaseException) -> None:
        with self.lock:
            if self.copy_error is None:
                self.copy_error = copy_error_text(exc)
