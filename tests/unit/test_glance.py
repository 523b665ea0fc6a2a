"""Big jobs at a glance (jupyter_ktrain/monitor/glance.py): the GPUs' heatmap from 8 GPUs up
and the log's starting ranks from 16 up, as the widget and the panel's payload show them
(a real 32-rank job: tests/integration/test_glance_cluster.py and the browser's
tests/browser/test_glance_browser.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.jobs import JobShape
from jupyter_ktrain.monitor.glance import (
    IDLE_COLOUR,
    gpu_grid,
    gpu_grids,
    heat_colour,
    line_level,
    start_ranks,
)
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.monitor.viewmodel import plot_panels
from jupyter_ktrain.pod.protocol import format_agent_line, format_rank_line, format_record
from jupyter_ktrain.server.build import metrics_payload
from jupyter_ktrain.server.core import PanelCore
from jupyter_ktrain.widgets.monitor import MonitorView

T0 = 1_763_700_000.0


def _sample(node: int, gpu: int, util: float, **more: float) -> dict[str, Any]:
    return {"type": "gpu", "node": node, "gpu": gpu, "t": T0, "util": util, "mem_used": 1000.0,
            "mem_total": 16000.0, "power": 100.0 + util, "temp": 50.0, **more}  # fmt: skip


def _latest(nodes: int, gpus: int) -> dict[tuple[int, int], dict[str, Any]]:
    return {(n, g): _sample(n, g, 90.0) for n in range(nodes) for g in range(gpus)}


def test_a_grid_is_nodes_by_gpus_with_the_idle_and_the_hot_marked() -> None:
    latest = _latest(2, 4)
    latest[(1, 2)] = _sample(1, 2, 0.0)  # idle
    latest[(0, 3)] = _sample(0, 3, 95.0, temp=91.0)  # too warm
    latest[(1, 1)] = _sample(1, 1, 80.0, mem_used=15800.0)  # its memory nearly full
    del latest[(1, 3)]  # no sample yet
    grid = gpu_grid(latest, "util", {0: "pod j-worker-0"})
    assert grid.title == "GPU utilisation (%)"
    assert grid.gpus == (0, 1, 2, 3)
    assert [r.name for r in grid.rows] == ["pod j-worker-0", "node 1"]
    assert [[c.label for c in r.cells] for r in grid.rows] == [
        ["90", "90", "90", "95"],
        ["90", "80", "0", ""],
    ]
    marks = {(r.node, c.gpu): c.mark for r in grid.rows for c in r.cells if c.mark}
    assert marks == {(1, 2): "idle", (0, 3): "hot", (1, 1): "hot"}
    assert (grid.idle, grid.hot) == (1, 2)
    idle = grid.rows[1].cells[2]
    assert idle.colour == IDLE_COLOUR
    assert idle.title == (
        "node 1 GPU 2 (idle): utilisation 0 %, memory used 1000 of 16000 MiB, power 100 W, 50 °C"
    )
    assert grid.rows[0].cells[0].colour == heat_colour(0.9)  # its share of 100 %
    assert grid.rows[1].cells[3].title == "node 1 GPU 3: none"
    # memory: on a scale up to the largest memory; the marks stay the GPU's
    memory = gpu_grid(latest, "mem_used")
    assert memory.top == 16000.0
    assert memory.rows[1].cells[1].colour == heat_colour(15800 / 16000)
    assert memory.rows[1].cells[2].mark == "idle"


def test_from_8_gpus_up_one_grid_per_field_and_no_gpu_lines() -> None:
    assert gpu_grids(_latest(1, 7)) == []
    assert [g.field for g in gpu_grids(_latest(2, 4))] == ["util", "mem_used", "power"]
    m = _big_job(nodes=1, gpus=4)
    assert [p.key.id for p in plot_panels(m) if p.key.kind == "gpu"] == [
        "gpu:mem_used", "gpu:power", "gpu:temp", "gpu:util"
    ]  # fmt: skip
    assert m.gpu_grids() == []
    m = _big_job(nodes=2, gpus=4)
    assert [p.key.kind for p in plot_panels(m)] == ["metric"]
    assert len(plot_panels(m, gpu_lines=True)) == 5  # a saved notebook's figure keeps them


def test_lines_that_say_an_error_or_a_warning() -> None:
    said = {
        "Traceback (most recent call last):": "error",
        "ValueError: bad shape": "error",
        "torch.OutOfMemoryError: CUDA out of memory": "error",
        "2026-11-27 ERROR loader stalled": "error",
        "E1127 10:00:00.1 123 socket.cpp:1] broken": "error",
        "/x/y.py:3: UserWarning: deprecated": "warning",
        "host:1:2 [0] NCCL WARN Call to connect returned": "warning",
        "W1127 10:00:00.1 123 c10d.cpp:1] slow": "warning",
        "WARNING: low disk": "warning",
        "step 3 loss 0.52": None,
        "no errors so far": None,
    }
    assert {text: line_level(text) for text in said} == said


def test_the_log_starts_with_rank_0_and_the_ranks_that_warned_from_16_ranks_up() -> None:
    assert start_ranks(range(15), {3}) is None
    assert start_ranks(range(16), {9, 3, 40}) == (0, 3, 9)
    assert start_ranks(range(32), set()) == (0,)


def _big_job(nodes: int = 4, gpus: int = 8, ranks: int = 32) -> MonitorModel:
    """A job of ``ranks`` ranks on ``nodes`` nodes of ``gpus`` GPUs: each rank a line and a
    loss; rank 5 warns, rank 9 fails; GPU 3 of node 2 idles."""
    shape = JobShape(nodes=nodes, procs_per_node=ranks // nodes, gpus_per_node=gpus)
    m = MonitorModel(JobHeader(name="big", shape=shape))
    m.set_state("Running", T0)
    per = ranks // nodes
    for r in range(ranks):
        text = {5: "UserWarning: slow loader", 9: "RuntimeError: boom"}.get(r, f"step from {r}")
        for step in range(2):
            rec = {"type": "metric", "step": step, "t": T0 + step, "loss": 1.0 / (r + 1)}
            m.feed_text(format_rank_line(r, format_record(rec)), T0 + step, node=r // per)
        m.feed_text(format_rank_line(r, text), T0 + 1, node=r // per)
    for n in range(nodes):
        for g in range(gpus):
            rec = _sample(n, g, 0.0 if (n, g) == (2, 3) else 90.0)
            m.feed_text(format_agent_line(format_record(rec)), T0 + 1, node=n)
    return m


def test_the_panels_payload_has_the_heatmaps_and_the_logs_starting_ranks() -> None:
    m = _big_job()
    p = metrics_payload(m, 100)
    assert [h["field"] for h in p["heatmaps"]] == ["util", "mem_used", "power"]
    util = p["heatmaps"][0]
    assert [row["name"] for row in util["rows"]] == ["node 0", "node 1", "node 2", "node 3"]
    assert util["gpus"] == list(range(8))
    idle = [(row["node"], c["gpu"]) for row in util["rows"] for c in row["cells"]
            if c["mark"] == "idle"]  # fmt: skip
    assert idle == [(2, 3)]
    assert not [panel for panel in p["panels"] if panel["key"].startswith("gpu:")]
    assert p["log_ranks"] == list(range(32))
    assert p["log_start"] == [0, 5, 9]
    assert p["log_flagged"] == {"5": "warning", "9": "error"}
    small = metrics_payload(_big_job(nodes=2, gpus=2, ranks=4), 100)
    assert small["heatmaps"] == []
    assert small["log_start"] is None


def test_a_big_jobs_metric_panel_is_a_band_and_the_ranks_that_matter_so_a_poll_stays_small():
    """From 16 ranks up the panel's metric panel is the band of every rank (min, median, max
    at each step) and the lines of rank 0 and the ranks that warned: its bytes do not grow
    with the ranks (a 512-rank job's payload was one line per rank per metric)."""
    p = metrics_payload(_big_job(), 100)
    (loss,) = [panel for panel in p["panels"] if panel["key"] == "metric:loss"]
    labels = [t["label"] for t in loss["traces"]]
    assert labels == ["min of 32 ranks", "median of 32 ranks", "max of 32 ranks",
                      "rank 0", "rank 5", "rank 9"]  # fmt: skip
    band = {t["label"].split()[0]: t for t in loss["traces"][:3]}
    assert band["min"]["x"] == [0.0, 1.0]
    assert band["min"]["y"] == [1 / 32, 1 / 32]
    assert band["max"]["y"] == [1.0, 1.0]
    assert band["median"]["y"] == [1 / 16, 1 / 16]  # the 17th smallest of 1/1 .. 1/32
    big = metrics_payload(_big_job(nodes=16, ranks=256), 100)
    size = {n: len(json.dumps(x["panels"])) for n, x in ((32, p), (256, big))}
    assert size[256] < size[32] * 1.2, size
    small = metrics_payload(_big_job(nodes=2, gpus=2, ranks=8), 100)
    (loss,) = [panel for panel in small["panels"] if panel["key"] == "metric:loss"]
    assert [t["label"] for t in loss["traces"]] == [f"rank {r}" for r in range(8)]


def test_the_widget_draws_the_heatmap_and_starts_its_log_with_the_ranks_that_matter() -> None:
    m = _big_job()
    view = MonitorView(m, flush_interval=0, plot_interval=0)
    view.update(T0 + 2)
    assert [h["field"] for h in view.heatmaps()] == ["util", "mem_used", "power"]
    assert view.heatmaps()[0]["rows"][2]["cells"][3]["mark"] == "idle"
    assert view.traces("gpu:util") == []
    assert view._plot is not None
    assert view._plot.fig.heatmaps == view.heatmaps()  # what the browser draws
    text = view.log_text()
    assert "[rank0] step from 0" in text
    assert "[rank5] UserWarning: slow loader" in text
    assert "[rank9] RuntimeError: boom" in text
    assert "[rank7]" not in text
    chooser = view.rank_filter.widget
    assert chooser.layout.display == ""
    assert chooser.value == (0, 5, 9)
    # the chosen ranks head the box (in view of its six rows, rank 9's error too), and the rank
    # selector beside it says they are chosen, not "all ranks"
    labels = [label for label, _ in chooser.options]
    assert labels[: chooser.rows] == ["rank 0", "rank 5 (warning)", "rank 9 (error)", "rank 1",
                                      "rank 2", "rank 3"]  # fmt: skip
    assert sorted(r for _, r in chooser.options) == list(range(32))
    view.update(T0 + 2.5)
    assert view.rank_select.options[0] == ("3 chosen ranks", "")
    chooser.value = (7, 9)  # the user chooses: rank 7's lines come back, rank 0's go
    view.update(T0 + 3)
    view.update(T0 + 3.1)
    assert view.rank_select.options[0] == ("2 chosen ranks", "")
    text = view.log_text()
    assert "[rank7] step from 7" in text
    assert "[rank0]" not in text
    view.rank_select.value = "rank0"  # one rank selected: it shows whatever the filter
    view.update(T0 + 4)
    assert "[rank0] step from 0" in view.log_text()


def test_a_small_jobs_widget_keeps_its_gpu_lines_and_every_rank() -> None:
    m = _big_job(nodes=2, gpus=2, ranks=4)
    view = MonitorView(m, flush_interval=0, plot_interval=0)
    view.update(T0 + 2)
    assert view.heatmaps() == []
    assert len(view.traces("gpu:util")) == 4
    assert view.rank_filter.widget.layout.display == "none"
    assert "[rank3] step from 3" in view.log_text()


def test_the_panels_logs_read_the_chosen_ranks_and_the_lines_of_no_rank(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "home")
    job_dir = backend.job_dir("big")
    job_dir.mkdir(parents=True)
    (job_dir / "plan.json").write_text("{}")
    (job_dir / "job.json").write_text('{"nodes": 2, "procs": 8}')
    (job_dir / "state.json").write_text('{"state": "Succeeded"}')
    for node in range(2):
        lines = [f"[rank{r}]: hello from {r}" for r in range(node * 8, node * 8 + 8)]
        lines += ["[rank11]: UserWarning: slow"] * (node == 1) + ["[agent]: node done"]
        (job_dir / f"node-{node}.log").write_text("".join(f"{x}\n" for x in lines))
    core = PanelCore({"local": lambda: backend})
    metrics = core.metrics("big")
    assert metrics["log_start"] == [0, 11]
    chosen = core.logs("big", ranks=set(metrics["log_start"]))
    shown = {(line["label"], line["text"]) for line in chosen["lines"]}
    assert shown == {("rank0", "hello from 0"), ("rank11", "hello from 11"),
                     ("rank11", "UserWarning: slow"), ("agent@0", "node done"),
                     ("agent@1", "node done")}  # fmt: skip
    every = core.logs("big")
    assert len(every["lines"]) == 16 + 1 + 2
