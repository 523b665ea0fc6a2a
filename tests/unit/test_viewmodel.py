"""The monitor's view-model: what every view shows, built once (panels, values, labels,
colours), the Trainer log record printed by every node shown once, the chart widget getting
every panel in one message, and the panel's per-poll cost growing with new lines, not the
job's age."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.jobs import JOB_STATES
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.monitor.viewmodel import (
    PALETTE,
    PanelKey,
    job_state,
    plot_panels,
    rank_colour,
    summary_values,
)
from jupyter_ktrain.pod.protocol import format_rank_line, format_record
from jupyter_ktrain.server.core import PanelCore

T0 = 1_763_700_000.0
HF_END = {"train_runtime": 12.5, "train_samples_per_second": 51.2, "total_flos": 1.2e12,
          "train_loss": 2.1}  # fmt: skip


def _trainer_run(model: MonitorModel, steps: int = 40, every: int = 5) -> None:
    for step in range(every, steps + 1, every):
        rec = {"type": "metric", "step": step, "total": steps, "loss": 4 - step / 20,
               "t": T0 + step}  # fmt: skip
        model.feed_text(format_rank_line(0, format_record(rec)), T0 + step, node=0)
        line = f"{{'loss': {4 - step / 20}, 'grad_norm': 1.5, 'epoch': {step / 40}}}"
        for rank in (0, 1):  # PrinterCallback: every node's local process zero prints it
            model.feed_text(format_rank_line(rank, line), T0 + step, node=rank)
    end = {"type": "metric", "step": steps, "total": steps, "t": T0 + steps + 1, **HF_END}
    model.feed_text(format_rank_line(0, format_record(end)), T0 + steps + 1, node=0)


def test_a_metric_reported_once_is_a_value_not_a_chart() -> None:
    m = MonitorModel(JobHeader("hf"))
    _trainer_run(m)
    assert [p.key for p in plot_panels(m)] == [PanelKey("metric", "loss")]
    values = {v.name: v.value for v in summary_values(m)}
    assert values == HF_END


def test_trainer_log_line_both_nodes_print_is_shown_once() -> None:
    m = MonitorModel(JobHeader("hf"))
    _trainer_run(m)
    shown = [e for e in m.logs if e.text.startswith("{'loss'")]
    assert [e.rank for e in shown] == [0] * 8  # once per logging step, rank 0's
    assert len(m.rank_logs["rank1"]) == 8  # rank 1's own view keeps its lines
    assert m.repeats_folded == 8
    m.feed_text(format_rank_line(1, "same text"), T0 + 50, node=1)
    m.feed_text(format_rank_line(0, "same text"), T0 + 50, node=0)
    assert sum(e.text == "same text" for e in m.logs) == 2  # only Trainer records fold


def test_panel_keys_titles_and_colours_come_from_one_place() -> None:
    assert PanelKey.parse("gpu:util") == PanelKey("gpu", "util")
    assert PanelKey.parse("loss").id == "metric:loss"
    assert PanelKey("gpu", "util").title == "GPU utilisation (%)"
    assert rank_colour(11) == PALETTE[1]


def test_a_state_word_outside_the_job_states_is_refused_by_name() -> None:
    assert [job_state(str(s)) for s in JOB_STATES] == list(JOB_STATES)
    with pytest.raises(ValueError, match=r"unknown job state 'running': a job is one of Pending,"):
        job_state("running")


def test_widget_chart_gets_every_panel_whole_in_one_message_per_draw() -> None:
    """Panels and traces are sent together when drawn (the browser draws each message once,
    in its next frame); a trace's points go as binary arrays."""
    from jupyter_ktrain.widgets.plots import PanelFigure

    plot = PanelFigure()
    sent: list[list[dict[str, Any]]] = []
    plot.fig.observe(lambda change: sent.append(change["new"]), names="panels")
    for name in ("a", "b", "c", "d"):
        plot.panel(name, name, "step")
        plot.set_trace(name, 0, "rank 0", "#1f77b4", [0, 1], [0.5, 0.25])
    assert sent == []  # nothing before the draw
    plot.draw()
    (panels,) = sent
    assert [p["id"] for p in panels] == ["a", "b", "c", "d"]
    (trace,) = panels[0]["traces"]
    assert trace["x"] == struct.pack("<2d", 0, 1)
    assert trace["y"] == struct.pack("<2f", 0.5, 0.25)


def _running_job(home: Path, name: str, lines: int) -> tuple[LocalBackend, Path]:
    backend = LocalBackend(home)
    job_dir = backend.job_dir(name)
    job_dir.mkdir(parents=True)
    (job_dir / "plan.json").write_text("{}")
    (job_dir / "job.json").write_text('{"nodes": 1}')
    (job_dir / "state.json").write_text(json.dumps({"state": "Running", "started": T0}))
    _append(job_dir, 0, lines)
    return backend, job_dir


def _append(job_dir: Path, start: int, count: int) -> None:
    with open(job_dir / "node-0.log", "a") as log, open(job_dir / "node-0.times", "a") as t:
        for i in range(start, start + count):
            rec = {"type": "metric", "step": i, "loss": 1 / (i + 1), "t": T0 + i}
            log.write(format_rank_line(0, f"line {i}") + "\n")
            log.write(format_rank_line(0, format_record(rec)) + "\n")
            t.write(f"{T0 + i:.6f}\n{T0 + i:.6f}\n")


def test_panel_poll_reads_the_new_lines_not_the_whole_log(tmp_path: Path) -> None:
    cost = {}
    for size in (500, 50_000):
        backend, job_dir = _running_job(tmp_path / str(size), "poll", size)
        core = PanelCore({"local": lambda b=backend: b}, max_lines=100_000)  # type: ignore[misc]
        offset = core.logs("poll")["next_offset"]
        core.metrics("poll")
        _append(job_dir, size, 50)
        before = backend._log_index.bytes_read
        page = core.logs("poll", offset=offset)
        panel = core.metrics("poll")["panels"][0]
        cost[size] = backend._log_index.bytes_read - before
        assert [ln["text"] for ln in page["lines"]][-1] == f"line {size + 49}"
        assert panel["traces"][0]["x"][-1] == size + 48  # the last record is held back
    assert cost[50_000] < 2 * cost[500]  # the same new lines: the same bytes read


def test_paging_through_a_big_log_keeps_every_line_once(tmp_path: Path) -> None:
    backend, job_dir = _running_job(tmp_path, "pages", 3_000)
    (job_dir / "state.json").write_text(json.dumps({"state": "Succeeded", "started": T0}))
    core = PanelCore({"local": lambda: backend}, max_lines=700)
    offset, texts = "", []
    while True:
        page = core.logs("pages", offset=offset)
        texts += [ln["text"] for ln in page["lines"]]
        offset = page["next_offset"]
        if not page["more"]:
            break
    assert texts == [f"line {i}" for i in range(3_000)]
