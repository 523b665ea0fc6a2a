"""The monitor's state: what the cell widget, the text view and (later) the side panel show.

One :class:`MonitorModel` per job. The backend's follow loop feeds it:

- ``feed(line, now, node=None)`` with each :class:`~jupyter_ktrain.pod.protocol.LogLine`
  from :func:`~jupyter_ktrain.pod.protocol.parse_line` (``feed_text`` parses for you);
  ``node`` is the replica the stream came from, when the caller knows it;
- ``set_state(state, now, message)`` when the job's state changes (``Running``, ``Succeeded``…);
- ``set_replicas(rows)`` with the current replica table (the backend's
  :class:`~jupyter_ktrain.jobs.ReplicaStatus` rows, as :func:`jupyter_ktrain.words.replica_rows`
  words them);
- ``set_live(progress, restarting)`` with the backend's progress and whether the job restarts
  (:mod:`jupyter_ktrain.words`): the job's one live truth, which the side panel shows too.
  Until a backend says, ``progress`` is the model's own, from the records it was fed.

Views read ``header``, ``progress`` (percent done and time left, from records with a
``total``: see :mod:`.progress`), ``replicas``, ``logs`` / ``rank_logs`` (bounded ring
buffers: older lines leave the view, never the log files; the model is a
:class:`~.logbook.LogBook`), ``metrics`` and ``gpus`` (streaming-downsampled series),
``transport`` and ``alerts()``. ``version`` grows on every
change, so a view can skip a redraw when nothing happened. Call ``check(now)`` on a timer:
some alerts depend on time passing without lines (a rank going silent).

Series x values: a metric is plotted against its ``step`` when the record has one, otherwise
against seconds since the job started; GPU series against seconds since the job started.
Pure: no I/O, no widget imports, not thread-safe (feed it from one thread).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ...hangs import Hang, HangWatch, hang_said
from ...jobs import PENDING, QUEUED, RUNNING, JobShape, JobState, ReplicaStatus, is_terminal
from ...kinds import job_kind
from ...pod.progress import JobProgress, Progress
from ...pod.protocol import (
    METRIC,
    RESERVED_KEYS,
    Checkpoint,
    Gpu,
    LogLine,
    Metric,
    Restart,
    Resume,
    Stack,
    parse_line,
    parse_record,
    record_type,
)
from ...words import replica_restart_text
from ..downsample import StreamingDownsampler
from ..glance import start_ranks
from ..logbook import LogBook
from ..nccl import NcclTransportParser, Transport
from ..stragglers import STEP_TIME, StepTimes
from .gpuwatch import GpuWatch, _GpuWatch, _num
from .header import Alert, JobHeader, Marker

__all__ = ["MonitorModel"]


class MonitorModel(GpuWatch, LogBook):
    """State of one job's monitor (see module docstring for the contract)."""

    def __init__(
        self,
        header: JobHeader,
        *,
        rdma_requested: bool = False,
        max_lines: int = 10_000,
        max_lines_per_rank: int = 2_000,
        plot_points: int = 2_000,
        hang_after: float | None = None,
        low_util_pct: float = 10.0,
        low_util_s: float = 120.0,
    ) -> None:
        self.header = header
        self.rdma_requested = rdma_requested
        self.plot_points = plot_points
        self.low_util_pct = low_util_pct
        self.low_util_s = low_util_s
        super().__init__(max_lines, max_lines_per_rank)
        self.replicas: list[ReplicaStatus] = []
        self.metrics: dict[tuple[int, str], StreamingDownsampler] = {}
        self.gpus: dict[tuple[int, int, str], StreamingDownsampler] = {}
        self.gpu_last: dict[tuple[int, int], dict[str, Any]] = {}
        self.last_records: dict[str, dict[str, Any]] = {}
        self.transports: dict[str, Transport] = {}
        self.version = 0
        self.record_count = 0
        self._nccl: dict[str, NcclTransportParser] = {}
        self._hangs = HangWatch(hang_after)
        self.hang: Hang | None = None  # the ranks named as hung now (check)
        self._hang_stacks: dict[int, Stack] | None = None  # their stacks, once taken
        self._rank_node: dict[int, int] = {}
        self.node_names: dict[int, str] = {}  # a node's replica (its pod): see node_of
        self._nodes: dict[str, int] = {}
        self._step_times = StepTimes()  # per-rank step time, the straggler (.stragglers)
        self._gpu_watch: dict[tuple[int, int], _GpuWatch] = {}
        self._alerts: dict[tuple[str, str], Alert] = {}
        self._queued_since: float | None = None  # since when the job waits in a queue
        self._t0: float | None = header.start_time
        self._progress = JobProgress()
        self._live_progress: Progress | None = None  # the backend's (see set_live)
        self.restarting = False  # the job starts its nodes again after a fault
        self.markers: list[Marker] = []  # restarts, in the metric plots (x = step)
        self.resumes = 0
        self._world_size: int | None = None  # as the last checkpoint or resume said
        self._rewinds: set[tuple[int, str]] = set()  # series that went back since the marker
        self._marker_is_resume = False

    # -- feeding ------------------------------------------------------------------------
    def feed_text(self, raw: str, now: float, node: int | None = None) -> None:
        """``feed(parse_line(raw), now, node)``; a trailing newline is ignored."""
        self.feed(parse_line(raw.rstrip("\r\n")), now, node)

    def feed(self, line: LogLine, now: float, node: int | None = None) -> None:
        """Take one parsed line that arrived at kernel time ``now`` from replica ``node``."""
        self.version += 1
        if self._t0 is None:
            self._t0 = now
        if line.rank is not None:
            self._heard(line, now, node)
        if line.record is not None:
            self.record_count += 1
            self._record(line, line.record, now, node)
            return
        self._keep_line(line, now, node)
        if "NCCL " in line.text:
            self._nccl_line(line, node, now)

    def node_of(self, replica: str) -> int:
        """The node number of ``replica`` (a pod, a local node): numbered in the order the
        feeder first names them, and remembered for the views' words ("pod j-worker-0")."""
        node = self._nodes.get(replica)
        if node is None:
            node = self._nodes[replica] = len(self._nodes)
            self.node_names[node] = replica
        return node

    def set_state(self, state: JobState, now: float, message: str = "") -> None:
        h = self.header
        if state in (PENDING, QUEUED) and h.waiting_since is None:
            h.waiting_since = now  # its clock counts the wait
        if state == h.state and message == h.message:
            return
        self.version += 1
        h.state, h.message = state, message
        if state == QUEUED and self._queued_since is None:
            self._queued_since = now
        if state == RUNNING and h.start_time is None:
            h.start_time = now
            self._t0 = self._t0 if self._t0 is not None else now
        if state == RUNNING:  # the ranks start: a hang before any step counts from here
            # (a driver-only kind's tasks report as its driver: its world waits on no rank)
            self._hangs.start(now, 0 if self._concurrent_steps else self._world() or 0)
        if is_terminal(state):
            h.end_time = now if h.end_time is None else h.end_time
            for key in [k for k in self._alerts if k[0] in ("rank-hung", "gpu-low-util")]:
                del self._alerts[key]
            self.hang = None

    def set_live(self, progress: Progress | None, restarting: bool) -> None:
        """The backend's progress (None: it has none; the model's own is shown) and whether
        the job is restarting: what every view of the job shows."""
        if (progress, restarting) == (self._live_progress, self.restarting):
            return
        self._live_progress, self.restarting = progress, restarting
        self.version += 1

    def set_replicas(
        self,
        rows: Iterable[ReplicaStatus],
        now: float | None = None,
        max_restarts: int | None = None,
    ) -> None:
        """The replica table; a replica whose restart count grew gets a ``restart`` alert
        (which one, why, the count against ``max_restarts``), kept for the rest of the run."""
        rows = list(rows)
        if rows == self.replicas:
            return
        before = {r.name: r.restarts for r in self.replicas}
        now = now if now is not None else time.time()
        for r in rows:
            if r.restarts > before.get(r.name, 0):
                self._hangs.forget(now)
                self._progress.restarted(now)  # restarting until the new rate is known
                self._step_times.forget()
                self._alerts[("restart", f"{r.name}#{r.restarts}")] = Alert(
                    "restart",
                    f"{r.name}#{r.restarts}",
                    replica_restart_text(r, max_restarts),
                    now,
                )
        self.replicas = rows
        self.version += 1

    def link(self, text: str, now: float) -> None:
        """Where to watch the job in its framework's own UI (a ``link`` alert, said once)."""
        if ("link", text) not in self._alerts:
            self._alerts[("link", text)] = Alert("link", text, text, now)
            self.version += 1

    def admitted(self, where: str, now: float) -> None:
        """A queue admitted the job (Kueue, to ``where``): after it waited as ``Queued``, an
        ``admitted`` alert says so and how long it waited."""
        if self._queued_since is None:
            return
        waited = max(0.0, now - self._queued_since)
        self._queued_since = None
        key = str(sum(1 for k in self._alerts if k[0] == "admitted") + 1)
        self._alerts[("admitted", key)] = Alert(
            "admitted", key, f"admitted by Kueue to {where} after {waited:.0f}s in the queue", now
        )
        self.version += 1

    def evicted(self, reason: str, text: str, count: int, now: float) -> None:
        """A queue (Kueue) evicted the job for ``reason`` for the ``count``-th time and requeued
        it: an ``evicted`` alert per eviction, kept for the rest of the run."""
        key = f"{reason}#{count}"
        if ("evicted", key) in self._alerts:
            return
        why = text or reason
        times = "" if count == 1 else f" (eviction {count} for this reason)"
        self._alerts[("evicted", key)] = Alert(
            "evicted", key, f"evicted by Kueue: {why}; requeued, not failed{times}", now
        )
        self.version += 1

    def set_header(self, **fields: Any) -> None:
        """Update header fields (e.g. ``image_digest`` once the image is pushed)."""
        self.header = replace(self.header, **fields)
        self.version += 1

    # -- reading ------------------------------------------------------------------------
    def alerts(self) -> list[Alert]:
        return sorted(self._alerts.values(), key=lambda a: (a.since, a.code, a.key))

    @property
    def inter_node(self) -> bool:
        """Whether data crosses a network: NCCL loads a network plugin (and logs "Using
        network Socket") in every job, but one node's ranks talk over NVLink, PCIe or shared
        memory only."""
        return self.header.shape.nodes > 1

    @property
    def transport(self) -> Transport | None:
        """The inter-node transport: a socket fallback anywhere wins, else the first seen;
        None for a single-node job (see :attr:`inter_node`; ``transports`` keeps each rank's
        parsed verdict all the same)."""
        if not self.inter_node:
            return None
        found = list(self.transports.values())
        for t in found:
            if not t.rdma:
                return t
        return found[0] if found else None

    @property
    def progress(self) -> Progress | None:
        """Percent done and time left, once a record with a ``total`` came (else None): the
        backend's when it has one (:meth:`set_live`), else the model's own from its records."""
        if self._live_progress is not None:
            return self._live_progress
        return self._progress.progress

    def start_ranks(self) -> tuple[int, ...] | None:
        """The ranks a log view starts with, from 16 ranks up (:func:`.glance.start_ranks`):
        rank 0 and those that printed a warning or an error; None for a smaller job."""
        return start_ranks(self.ranks | set(range(self._world() or 0)), self.flagged)

    def _world(self) -> int | None:
        """The job's ranks, from its shape (None: unknown)."""
        shape = self.header.shape
        return shape.nodes * shape.procs_per_node if shape != JobShape() else None

    def metric_names(self) -> list[str]:
        return sorted({name for _, name in self.metrics})

    def elapsed_x(self, t: float) -> float:
        return round(t - (self._t0 if self._t0 is not None else t), 3)

    # -- internals ----------------------------------------------------------------------
    def _heard(self, line: LogLine, now: float, node: int | None) -> None:
        rank = line.rank
        assert rank is not None
        step = line.record.get("step") if line.record is not None else None
        step = step if isinstance(step, int) and not isinstance(step, bool) else None
        self._hangs.heard(rank, now, step)
        if node is not None:
            self._rank_node[rank] = node
        if self.hang is not None and rank in self.hang.ranks:
            self._set_hang(None, now)  # it moves again

    def _record(self, line: LogLine, rec: dict[str, Any], now: float, node: int | None) -> None:
        kind = record_type(rec)
        if line.rank is not None and "rank" not in rec:
            rec = {**rec, "rank": line.rank}
        plotted = any(k not in RESERVED_KEYS for k in rec)
        # a progress-only record (step and total) does not hide the last metric values
        self.last_records["progress" if kind == METRIC and not plotted else str(kind)] = rec
        record = parse_record(rec)
        if isinstance(record, Metric):
            self._metric(line.rank if line.rank is not None else record.rank, record, now)
        elif isinstance(record, Gpu):
            self._gpu(rec, now, node)
        elif isinstance(record, Restart):  # a node restarted its ranks itself (an MPIJob's mpirun)
            of = f" of at most {record.max}" if record.max is not None else ""
            key = f"launcher#{record.n}"
            text = f"the launcher started the ranks again: {record.why} (restart {record.n}{of})"
            self._alerts[("restart", key)] = Alert("restart", key, text, now)
        elif isinstance(record, Resume):
            self._resumed(record, now)
            self._progress.feed(record.rank or 0, record, now)
        elif isinstance(record, Checkpoint) and record.world_size is not None:
            self._world_size = record.world_size

    def _metric(self, rank: int | None, rec: Metric, now: float) -> None:
        if rank is None:
            return
        step = rec.step
        x = float(step) if step is not None else self.elapsed_x(_num(rec.t, now))
        self._progress.feed(rank, rec, now)
        if step is not None and rec.t is not None and not self._concurrent_steps:
            self._step_time(rank, step, rec.t, now)
        for name, value in rec.values.items():
            series = self.metrics.get((rank, name))
            if series is None:
                series = self.metrics[(rank, name)] = StreamingDownsampler(self.plot_points)
            elif step is not None and series.last is not None and x <= series.last[0]:
                if self._concurrent_steps:  # another task's earlier step, come late
                    series.place(x, value)
                    continue
                series.truncate(x)  # a restarted run reports this step again: it replaces
                self._rewound((rank, name), x)
            series.append(x, value)

    def _step_time(self, rank: int, step: int, t: float, now: float) -> None:
        """Each rank's step time once every rank reported ``step`` (a series of its own), and
        the straggler alert (:mod:`.stragglers`)."""
        shape = self.header.shape
        for r, seconds in self._step_times.feed(rank, step, t, self._world()).items():
            series = self.metrics.get((r, STEP_TIME))
            if series is None:
                series = self.metrics[(r, STEP_TIME)] = StreamingDownsampler(self.plot_points)
            if series.last is None or step > series.last[0]:
                series.append(float(step), round(seconds, 4))
        slow = self._step_times.straggler
        key = ("straggler", f"rank{slow.rank}") if slow is not None else None
        for old in [k for k in self._alerts if k[0] == "straggler" and k != key]:
            del self._alerts[old]
        if slow is None or key is None or key in self._alerts:
            return
        where = self._where([slow.rank]).get(slow.rank)
        if where is not None and shape.gpus_per_node and shape.procs_per_node:
            where += f", GPU {slow.rank % shape.procs_per_node}"
        named = f"rank {slow.rank}" + (f" ({where})" if where else "")
        self._alerts[key] = Alert(
            "straggler",
            key[1],
            f"{named} is the slowest: its steps take {slow.seconds:.3g} s against a median "
            f"of {slow.median:.3g} s ({slow.ratio:.2f}x) for {slow.steps} steps in a row, up "
            f"to step {slow.step}; every other rank waits for it",
            now,
        )

    @property
    def _concurrent_steps(self) -> bool:
        """A driver-only kind (Ray): its tasks report as the driver, many at once, so a step
        lower than the last is another task's, come late, not a restarted run's."""
        kind = job_kind(self.header.shape.kind)
        return kind is not None and kind.driver_only

    def _rewound(self, series: tuple[int, str], x: float) -> None:
        """One marker per restart: every series goes back once in a restart, so a series that
        goes back a second time since the last marker (or the first one ever) is a new one."""
        if self.markers and series not in self._rewinds:
            self._rewinds.add(series)
            return
        self.markers.append(Marker(x, f"restarted: step {x:g} again"))
        self._rewinds, self._marker_is_resume = {series}, False

    def _resumed(self, rec: Resume, now: float) -> None:
        """A ``resume`` record (``ktrain.checkpoint().load()`` on rank 0): an alert that says
        from which step (and a changed world size), and the plots' marker there."""
        step = rec.step
        self.resumes += 1
        self._hangs.forget(now)  # a new attempt: every rank's pace starts afresh
        self._step_times.forget()
        size = rec.world_size
        said = f"resumed from step {step}"  # the alert and the plots' marker say the same
        text = f"{said} (checkpoint {rec.file or '?'})"
        if size is not None:
            before = self._world_size  # the ranks that saved checkpoints before
            if before is not None and before != size:
                text += f"; the world size changed from {before} to {size}"
            self._world_size = size
        key = f"#{self.resumes}"
        self._alerts[("resume", key)] = Alert("resume", key, text, now)
        marker = Marker(float(step), said)
        if self.markers and not self._marker_is_resume and self.markers[-1].x > step:
            self.markers[-1] = marker  # the restart some ranks' repeated steps marked first
        else:
            self.markers.append(marker)
            self._rewinds = set()
        self._marker_is_resume = True

    def _nccl_line(self, line: LogLine, node: int | None, now: float) -> None:
        stream = f"rank{line.rank}" if line.rank is not None else f"{line.source}@{node}"
        parser = self._nccl.setdefault(stream, NcclTransportParser())
        verdict = parser.feed(line.text)
        if verdict is None:
            return
        self.transports[stream] = verdict
        key = ("rdma-fallback", stream)
        if self.rdma_requested and self.inter_node and verdict.kind == "socket":
            self._alerts[key] = Alert(
                "rdma-fallback",
                stream,
                f"RDMA was requested but NCCL on {stream} uses TCP sockets (NET/Socket): "
                "no usable RDMA device in the pod (check the RDMA resource request, "
                "NCCL_IB_HCA and the host network setup)",
                now,
            )
        else:
            self._alerts.pop(key, None)

    def check(self, now: float) -> list[Alert]:
        """Re-evaluate alerts that depend on time passing; returns :meth:`alerts`."""
        if self.header.state == RUNNING:
            hang = self._hangs.check(now)
            if (hang and hang.ranks) != (self.hang and self.hang.ranks):
                self._set_hang(hang, now)
        return self.alerts()

    def hang_stacks(self, got: list[tuple[str, Stack]], now: float) -> None:
        """The stacks taken for the hang named now (every rank's, or the named ones'): its
        alert shows where each named rank waits, and when every rank is stopped at one step,
        the ranks not inside a collective are the ones named."""
        if self.hang is None:
            return
        self._hang_stacks = {s.rank: s for _, s in got if s.rank is not None}
        self._set_hang(self.hang, now, keep_stacks=True)

    def _set_hang(self, hang: Hang | None, now: float, keep_stacks: bool = False) -> None:
        for key in [k for k in self._alerts if k[0] == "rank-hung"]:
            del self._alerts[key]
        if not keep_stacks:
            self._hang_stacks = None
        self.hang = hang
        self.version += 1
        if hang is None:
            return
        hang, text = hang_said(hang, self._hang_stacks, self._where(hang.steps), self.header.name)
        said_key = hang.key + ("+stacks" if self._hang_stacks is not None else "")
        self._alerts[("rank-hung", said_key)] = Alert("rank-hung", said_key, text, now)

    def _where(self, ranks: Iterable[int]) -> dict[int, str]:
        """Where each rank runs, as the views name it: its pod, or its local node."""
        out = {}
        for rank in ranks:
            node = self._rank_node.get(rank)
            if node is not None:
                out[rank] = self.node_word(node)
        return out

    def node_word(self, node: int) -> str:
        """Node ``node`` as the views name it: its pod, or ``node N`` on the local backend."""
        name = self.node_names.get(node, "")
        if not name and node < len(self.replicas):
            name = self.replicas[node].name
        local = self.header.backend == "local" or not name
        return f"node {node}" if local else f"pod {name}"
