"""Kernel CPU time and bytes sent per plot update after 10^6 reported points.

Ours: MonitorModel (streaming MinMax buckets) + MonitorView (one small chart widget,
downsampled traces as binary arrays, one message per redraw). Peer, measured in the same
run: a naive FigureWidget that keeps every point and re-assigns the trace's x/y on each
update (the only way to "append" to a plotly trace), both with Python lists and with numpy
arrays (binary buffers, the stronger peer).

"Not growing with run length": our bytes per update at 10^5 and 10^6 points are compared
(the cap is 2,000 drawn points; the naive peer grows 10x between the two).

Bytes are counted the way ipywidgets sends them: the comm is replaced (``comm.create_comm``
is meant to be replaced) by one that measures the JSON body and binary buffers of every
``comm_msg``; the one-time ``comm_open`` of each widget (plotly.js, ~5 MB, for a
FigureWidget) is reported apart. CPU is ``time.process_time`` around the update
(downsampling, validation, serialisation). Prints one JSON object as its last line.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import comm

from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.pod.protocol import METRIC, TYPE, LogLine
from jupyter_ktrain.widgets.monitor import MonitorView

BATCH = 1_000  # new points between two plot updates
UPDATES = 5


class Meter:
    def __init__(self) -> None:
        self.bytes = 0
        self.opened = 0

    def install(self) -> None:
        meter = self

        class RecordingComm(comm.DummyComm):  # type: ignore[misc]
            def publish_msg(
                self,
                msg_type: str,
                data: Any = None,
                metadata: Any = None,
                buffers: Any = None,
                **keys: Any,
            ) -> None:
                size = len(json.dumps(data, default=str))
                size += sum(memoryview(b).nbytes for b in buffers or ())
                if msg_type == "comm_open":
                    meter.opened += size
                else:
                    meter.bytes += size

        comm.create_comm = RecordingComm


def loss(i: int) -> float:
    return 2.0 * math.exp(-i / 300_000) + 0.05 * math.sin(i / 50.0)


def metric_line(i: int) -> LogLine:
    rec = {TYPE: METRIC, "rank": 0, "step": i, "t": 0.0, "loss": loss(i)}
    return LogLine(text="", rank=0, source="rank", record=rec)


def ours(meter: Meter, n: int) -> dict[str, float]:
    model = MonitorModel(JobHeader(name="bench"), plot_points=2000)
    model.set_state("Running", 0.0)
    view = MonitorView(model, flush_interval=0, plot_interval=0)
    t0 = time.process_time()
    for i in range(n):
        model.feed(metric_line(i), 0.0)
    feed_us = (time.process_time() - t0) / n * 1e6
    view.update(0.0)  # creates the figure
    cpu, sent = [], []
    for u in range(UPDATES):
        for i in range(n + u * BATCH, n + (u + 1) * BATCH):
            model.feed(metric_line(i), 0.0)
        b0, c0 = meter.bytes, time.process_time()
        view.update(float(u + 1))
        cpu.append(time.process_time() - c0)
        sent.append(meter.bytes - b0)
    points = len(view.traces("loss")[0].x)
    return {
        "cpu_s": statistics.median(cpu),
        "bytes": statistics.median(sent),
        "feed_us": feed_us,
        "points": points,
    }


def naive(meter: Meter, n: int, use_numpy: bool) -> dict[str, float]:
    import numpy as np
    import plotly.graph_objects as go

    fig = go.FigureWidget()
    fig.add_scatter(x=[], y=[], mode="lines")
    xs = [float(i) for i in range(n)]
    ys = [loss(i) for i in range(n)]
    cpu, sent = [], []
    for u in range(3):
        for i in range(n + u * BATCH, n + (u + 1) * BATCH):
            xs.append(float(i))
            ys.append(loss(i))
        b0, c0 = meter.bytes, time.process_time()
        with fig.batch_update():
            if use_numpy:
                fig.data[0].x, fig.data[0].y = np.asarray(xs), np.asarray(ys)
            else:
                fig.data[0].x, fig.data[0].y = xs, ys
        cpu.append(time.process_time() - c0)
        sent.append(meter.bytes - b0)
    return {"cpu_s": statistics.median(cpu), "bytes": statistics.median(sent)}


def main() -> None:
    meter = Meter()
    meter.install()
    small = ours(meter, 100_000)
    big = ours(meter, 1_000_000)
    peer_lists = naive(meter, 1_000_000, use_numpy=False)
    peer_numpy = naive(meter, 1_000_000, use_numpy=True)
    peer_numpy_small = naive(meter, 100_000, use_numpy=True)
    for name, r in (("ours@1e5", small), ("ours@1e6", big), ("naive-lists@1e6", peer_lists),
                    ("naive-numpy@1e6", peer_numpy)):  # fmt: skip
        print(
            f"{name:16s} cpu/update {r['cpu_s'] * 1e3:9.2f} ms   bytes/update {r['bytes']:>12,.0f}"
        )
    print(f"ours: model feed {big['feed_us']:.2f} µs/point; {big['points']} points drawn")
    strongest_cpu = min(peer_lists["cpu_s"], peer_numpy["cpu_s"])
    strongest_bytes = min(peer_lists["bytes"], peer_numpy["bytes"])
    result = {
        "cpu_ms_per_update": round(big["cpu_s"] * 1e3, 2),
        "naive_cpu_ms_per_update": round(strongest_cpu * 1e3, 2),
        "cpu_ratio_vs_naive": round(strongest_cpu / big["cpu_s"], 1),
        "cpu_ratio_vs_naive_goal": ">=20",
        "bytes_per_update": int(big["bytes"]),
        "naive_bytes_per_update": int(strongest_bytes),
        "bytes_ratio_vs_naive": round(strongest_bytes / big["bytes"], 1),
        "bytes_ratio_vs_naive_goal": ">=20",
        "bytes_per_update_at_1e5": int(small["bytes"]),
        "bytes_growth_1e5_to_1e6": round(big["bytes"] / small["bytes"], 2),
        # drawn points vary between 1,000 and 2,000 as buckets merge: bounded, not growing
        "bytes_growth_1e5_to_1e6_goal": "<=1.5",
        "naive_bytes_growth_1e5_to_1e6": round(peer_numpy["bytes"] / peer_numpy_small["bytes"], 2),
        "points_drawn_at_1e6": big["points"],
        "points_drawn_at_1e6_goal": "<=2000",
        "feed_us_per_point": round(big["feed_us"], 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
