"""512 ranks in every view, by simulation: a 64-pod x 8-rank job's streams replayed at the
rates a real job makes them, through the same follow loop, model and widget the notebook uses,
and the side panel's payloads, without 512 processes.

Each of the 64 pods' streams carries, every second: one line per rank (``[rankN]: step ...``),
one ``ktrain.report`` record per rank (loss, lr: a step a second), and the agent's GPU sample
for each of its 8 GPUs (one record per GPU a second, the sampler's default). That is 1,536
lines a second (``LINES_PER_S``), for ``SECONDS`` seconds. The lines
are made before the clock starts; a pod's source hands out what its pod has printed by now,
as a log stream does.

Measured in this one process (the kernel's part; the streams' own reading is the backend's):

- the kernel's CPU per line and per second while following (``time.process_time``) and as a
  share of one core: the follow loop, the model, torchrun's fold, the widget's redraws;
- the widget's bytes per update (every ``comm_msg`` the kernel sends, counted as in
  ``bench/plots.py``), in the first and the last third of the run: bounded means the last
  third's largest update is no bigger than the first third's (it does not grow with the run);
- the panel's payloads per poll (``server/build.py``: the job's detail and its metrics, built
  from a model fed the same lines, as ``PanelCore`` builds them) and the CPU they cost.

The peer, in the same run: the same lines fed with no views at all (the model alone), the
floor any view adds to. Goal: the kernel under 20 % of one core at 512 ranks, payloads bounded.
The page's side (longest task, redraw time in Chromium) is not measured here.

Prints one JSON object as its last line.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import comm

from jupyter_ktrain.jobs import JobShape, JobState, JobStatus, ReplicaPhase, ReplicaStatus
from jupyter_ktrain.monitor.follow_loop import follow
from jupyter_ktrain.monitor.live import ModelSink
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.pod.protocol import format_rank_line, format_record
from jupyter_ktrain.server.build import job_detail, metrics_payload
from jupyter_ktrain.widgets.monitor import MonitorView

PODS = 64
PER_POD = 8
RANKS = PODS * PER_POD
SECONDS = 20
PANEL_EVERY = 1.0  # the side panel polls a followed job about once a second
LINES_PER_S = RANKS * 2 + PODS * PER_POD  # a line and a report per rank, a sample per GPU


def pod_lines(pod: int, second: int) -> list[str]:
    """What pod ``pod`` prints in second ``second`` (its ranks' lines and reports, its GPUs)."""
    out = []
    t = 1_000.0 + second
    for local in range(PER_POD):
        rank = pod * PER_POD + local
        loss = 2.0 / (1 + second) + rank * 1e-4
        out.append(format_rank_line(rank, f"step {second} loss {loss:.4f} tokens/s 51234"))
        out.append(
            format_rank_line(
                rank,
                format_record(
                    {
                        "type": "metric",
                        "rank": rank,
                        "step": second,
                        "total": SECONDS,
                        "t": t,
                        "loss": loss,
                        "lr": 1e-4,
                    }
                ),
            )
        )
    for gpu in range(PER_POD):
        rec = {"type": "gpu", "node": pod, "gpu": gpu, "uuid": f"GPU-{pod:03d}-{gpu}", "t": t,
               "util": 90.0 + gpu, "power": 650.0, "temp": 60.0, "mem_used": 70_000.0,
               "mem_total": 81_559.0}  # fmt: skip
        out.append("[agent]: " + format_record(rec))
    return out


@dataclass
class Source:
    """One pod's log stream: hands out what the pod has printed by now (a second at a time)."""

    replica: str
    seconds: list[list[str]]
    start: float
    given: int = 0

    def read(self) -> list[str]:
        due = min(len(self.seconds), int(time.monotonic() - self.start) + 1)
        out: list[str] = []
        while self.given < due:
            out += self.seconds[self.given]
            self.given += 1
        return out

    def finish(self) -> list[str]:
        self.start = -1e9
        return self.read()

    def close(self) -> None:
        pass


@dataclass
class Backend:
    name: str = "kubernetes"
    rdma_capable: bool = False

    def more_log_sources(self, name: str, have: set[str]) -> list[Source]:
        return []


@dataclass
class ReplayJob:
    """A job as :func:`follow` sees one: its pods' streams and its status (Running until every
    second was handed out, then Succeeded)."""

    sources: list[Source]
    start: float
    name: str = "scale"
    run: int | None = 1
    backend: Backend = field(default_factory=Backend)
    statuses: int = 0

    def log_sources(self) -> list[Source]:
        return list(self.sources)

    def status(self) -> JobStatus:
        self.statuses += 1
        done = time.monotonic() - self.start >= SECONDS
        phase = ReplicaPhase.SUCCEEDED if done else ReplicaPhase.RUNNING
        replicas = tuple(ReplicaStatus(s.replica, phase) for s in self.sources)
        state = JobState.SUCCEEDED if done else JobState.RUNNING
        return JobStatus(self.name, state, replicas=replicas, started=self.start)


class Meter:
    """Counts what the kernel sends to the page: every comm message's JSON and buffers."""

    def __init__(self) -> None:
        self.bytes = 0
        self.updates: list[int] = []

    def install(self) -> None:
        meter = self

        class RecordingComm(comm.DummyComm):  # type: ignore[misc]
            def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None,
                            buffers: Any = None, **keys: Any) -> None:  # fmt: skip
                if msg_type != "comm_open":
                    size = len(json.dumps(data, default=str))
                    size += sum(memoryview(b).nbytes for b in buffers or ())
                    meter.bytes += size

        comm.create_comm = RecordingComm


def pods() -> list[list[list[str]]]:
    return [[pod_lines(p, s) for s in range(SECONDS)] for p in range(PODS)]


def header() -> JobHeader:
    return JobHeader(
        name="scale", backend="kubernetes", run=1,
        shape=JobShape("PyTorchJob", PODS, PER_POD, PER_POD),
    )  # fmt: skip


class MeteredView:
    """The widget, with the bytes of each of its updates and the panel's payloads on a poll."""

    def __init__(self, model: MonitorModel, meter: Meter, panel: bool) -> None:
        self.view = MonitorView(model)
        self.model = model
        self.meter = meter
        self.panel = panel
        self.sizes: list[tuple[float, int]] = []  # (seconds since start, bytes) per update
        self.panel_sizes: list[tuple[float, int]] = []
        self.panel_cpu = 0.0
        self.next_poll = 0.0
        self.start = time.monotonic()

    def update(self, now: float) -> None:
        before = self.meter.bytes
        self.view.update(now)
        if self.meter.bytes > before:
            self.sizes.append((time.monotonic() - self.start, self.meter.bytes - before))
        if self.panel and time.monotonic() >= self.next_poll:
            self.next_poll = time.monotonic() + PANEL_EVERY
            c0 = time.process_time()
            status = JobStatus("scale", JobState.RUNNING, started=self.start)
            body = json.dumps(
                [job_detail(status, "kubernetes", now, None), metrics_payload(self.model, 600)]
            )
            self.panel_cpu += time.process_time() - c0
            self.panel_sizes.append((time.monotonic() - self.start, len(body)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view, name)


class NoView:
    def update(self, now: float) -> None:
        pass


def run(streams: list[list[list[str]]], meter: Meter | None) -> dict[str, Any]:
    start = time.monotonic()
    sources = [Source(f"scale-worker-{p}", streams[p], start) for p in range(PODS)]
    job = ReplayJob(sources, start)
    model = MonitorModel(header(), hang_after=None)
    view: Any = MeteredView(model, meter, panel=True) if meter is not None else NoView()
    sink = ModelSink(model, view)
    c0, w0 = time.process_time(), time.monotonic()
    final = follow(job, sink)  # type: ignore[arg-type]
    cpu, wall = time.process_time() - c0, time.monotonic() - w0
    lines = sum(len(x) for p in streams for x in p)
    assert final.state is JobState.SUCCEEDED, final
    out = {"cpu_s": cpu, "wall_s": wall, "lines": lines, "polls": job.statuses}
    if isinstance(view, MeteredView):
        out["view"] = view
    return out


def thirds(sizes: list[tuple[float, int]]) -> tuple[list[int], list[int]]:
    first = [b for t, b in sizes if t < SECONDS / 3]
    last = [b for t, b in sizes if t >= SECONDS * 2 / 3]
    return first, last


def main() -> None:
    meter = Meter()
    meter.install()
    streams = pods()
    floor = run(streams, None)
    ours = run(streams, meter)
    view: MeteredView = ours["view"]
    first, last = thirds(view.sizes)
    pfirst, plast = thirds(view.panel_sizes)
    share = ours["cpu_s"] / ours["wall_s"]
    per_line_ms = ours["cpu_s"] / ours["lines"] * 1e3
    rate = ours["lines"] / ours["wall_s"]
    print(
        f"{RANKS} ranks in {PODS} pods, {ours['lines']:,} lines in {ours['wall_s']:.1f} s "
        f"({rate:,.0f} lines/s), {ours['polls']} status polls"
    )
    print(
        f"kernel CPU, widget + panel payloads: {ours['cpu_s']:.2f} s = {share:.1%} of a core, "
        f"{per_line_ms * 1e3:.1f} µs a line (panel payloads {view.panel_cpu:.2f} s of it)"
    )
    print(
        f"kernel CPU, model alone (floor):     {floor['cpu_s']:.2f} s = "
        f"{floor['cpu_s'] / floor['wall_s']:.1%} of a core"
    )
    median = statistics.median(b for _, b in view.sizes)
    print(
        f"widget: {len(view.sizes)} updates, bytes each: median {median:,.0f}, "
        f"largest in the first third {max(first):,}, in the last third {max(last):,}"
    )
    print(
        f"panel: {len(view.panel_sizes)} polls, bytes each: first third {max(pfirst):,}, "
        f"last third {max(plast):,}"
    )
    print(json.dumps({
        "kernel_core_share_512_ranks": round(share, 3),
        "kernel_core_share_512_ranks_goal": "<0.20",
        "kernel_us_per_line": round(per_line_ms * 1e3, 1),
        "floor_core_share_model_alone": round(floor["cpu_s"] / floor["wall_s"], 3),
        "widget_bytes_per_update_max_last_vs_first_third": round(max(last) / max(first), 2),
        "widget_bytes_per_update_max_last_vs_first_third_goal": "<=1.0 (bounded)",
        "widget_bytes_per_update_median": int(median),
        "panel_bytes_per_poll_max_last_vs_first_third": round(max(plast) / max(pfirst), 2),
        "panel_bytes_per_poll_max_last_vs_first_third_goal": "<=1.0 (bounded)",
        "panel_bytes_per_poll_max": max(b for _, b in view.panel_sizes),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
