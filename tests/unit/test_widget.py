"""The cell monitor as a user sees it: header, replicas, logs, plots, bounded traffic."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_ktrain.jobs import JobShape, ReplicaStatus
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.pod.protocol import format_agent_line, format_rank_line, format_record
from jupyter_ktrain.widgets.monitor import MonitorView, TextView, make_view

T0 = 1_763_700_000.0


class CommBytes:
    """Counts what ipywidgets would send to the frontend: JSON body + binary buffers."""

    def __init__(self) -> None:
        self.bytes = 0  # comm_msg: state updates (what Jupyter's rate limits count)
        self.messages = 0
        self.opened: list[int] = []  # comm_open sizes: one per widget created

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import comm

        counter = self

        class RecordingComm(comm.DummyComm):  # type: ignore[misc]
            def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None,
                            buffers: Any = None, **keys: Any) -> None:  # fmt: skip
                size = len(json.dumps(data, default=str))
                size += sum(memoryview(b).nbytes for b in buffers or ())
                if msg_type == "comm_open":
                    counter.opened.append(size)
                else:
                    counter.messages += 1
                    counter.bytes += size

        monkeypatch.setattr(comm, "create_comm", RecordingComm)


@pytest.fixture
def traffic(monkeypatch: pytest.MonkeyPatch) -> Iterator[CommBytes]:
    counter = CommBytes()
    counter.install(monkeypatch)
    return counter


def _job() -> MonitorModel:
    m = MonitorModel(
        JobHeader(name="mnist", shape=JobShape(nodes=2, procs_per_node=2)), plot_points=2000
    )
    m.set_state("Running", T0)
    m.set_replicas(
        [
            ReplicaStatus("node-0", "Running", 0, "localhost", last_event="started torchrun"),
            ReplicaStatus("node-1", "Running", 1, "localhost", last_event="restarted"),
        ]
    )
    return m


def _feed(m: MonitorModel, n: int, t: float = T0, first: int = 0) -> None:
    """``n`` log lines and metric points over 4 ranks; steps from ``first`` on."""
    for i in range(n):
        r = i % 4
        m.feed_text(format_rank_line(r, f"step {i} <ok> & fine"), t + i * 0.01, node=r // 2)
        step = first + i
        rec = {"type": "metric", "rank": r, "step": step, "t": t, "loss": 1.0 / (step + 1)}
        m.feed_text(format_rank_line(r, format_record(rec)), t + i * 0.01, node=r // 2)


def test_user_sees_header_replicas_logs_and_plots(traffic: CommBytes) -> None:
    m = _job()
    cancelled: list[bool] = []
    view = MonitorView(m, on_cancel=lambda: cancelled.append(True), clock=lambda: T0 + 65)
    _feed(m, 40)
    m.feed_text(format_agent_line(format_record({"type": "gpu", "node": 0, "gpu": 0,
                "t": T0 + 1, "util": 88.0, "mem_used": 1200.0})), T0 + 1, node=0)  # fmt: skip
    view.update(T0 + 65)
    # the line that matters on one line, its details under it (one wrapped header read three
    # lines at 1100 px)
    head = '"ktrain-HeaderHead" title="mnist · PyTorchJob on local · Running 1m 05s"'
    assert head in view.header.value
    assert '"ktrain-HeaderDetails" title="2 node(s) × 2 proc(s)"' in view.header.value
    assert "node-1" in view.replicas.value
    assert "restarted" in view.replicas.value
    text = view.log_text()
    assert "[rank0] step 0 <ok> & fine" in text  # escaped in HTML, readable as text
    assert "[rank3] step 39 <ok> & fine" in text
    assert "@@ktrain" not in text  # records are plotted, not printed
    assert [o[1] for o in view.rank_select.options] == ["", "rank0", "rank1", "rank2", "rank3"]
    loss = view.traces("loss")
    assert [t.label for t in loss] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert list(loss[0].x) == [float(s) for s in range(0, 40, 4)]
    assert list(view.traces("gpu:util")[0].y) == [88.0]
    assert view.traces("gpu:util")[0].panel != loss[0].panel  # its own panel
    view.cancel_button.click()
    assert cancelled == [True]
    assert view.panel_button.disabled  # no callback given


def test_rank_selector_and_filter_rebuild_the_pane() -> None:
    m = _job()
    view = MonitorView(m, flush_interval=0, plot_interval=1e9)
    _feed(m, 40)
    view.update(T0 + 1)
    view.rank_select.value = "rank2"
    view.filter_text.value = "STEP 1"
    view.update(T0 + 2)
    lines = view.log_text().splitlines()
    assert lines == ["[rank2] step 10 <ok> & fine", "[rank2] step 14 <ok> & fine",
                     "[rank2] step 18 <ok> & fine"]  # fmt: skip
    view.follow.value = False
    view.update(T0 + 3)
    _feed(m, 8, T0 + 4)
    view.update(T0 + 5)
    assert view.log_text().splitlines() == lines  # paused
    assert "paused · 2 new line(s)" in view.log_status.value


def test_traffic_per_flush_is_bounded_and_does_not_grow(traffic: CommBytes) -> None:
    m = _job()
    view = MonitorView(m, flush_interval=0, plot_interval=0, chunk_bytes=8_000)
    per_update = []
    view.update(T0)
    for k in range(60):
        _feed(m, 400, T0 + k, first=400 * k)  # 400 lines and 400 metric points per update
        before = traffic.bytes
        view.update(T0 + k)
        per_update.append(traffic.bytes - before)
    assert max(per_update[-10:]) < 1.5 * max(per_update[10:20])  # flat, not growing
    assert max(per_update) < 250_000
    # one chart (its module, ~10 KB, opens with it), not one per metric; and no plotting
    # library: plotly's FigureWidget shipped plotly.js (~5 MB) when it opened
    assert sum(size > 5_000 for size in traffic.opened) == 1, traffic.opened
    assert max(traffic.opened) < 100_000, traffic.opened
    assert len(view.log_box.children) <= 50  # older chunks leave the view
    assert all(len(t.x) <= 2000 for t in view.traces("loss"))
    assert m.metrics[(0, "loss")].count == 6000


def test_backlog_is_skipped_with_a_marker() -> None:
    m = MonitorModel(JobHeader(name="j"), max_lines=100_000)
    view = MonitorView(m, flush_interval=0, max_flush_bytes=10_000)
    view.update(T0)
    for i in range(5_000):
        m.feed_text(format_rank_line(0, f"line {i:05d} " + "x" * 40), T0)
    view.update(T0 + 1)
    text = view.log_text()
    assert "lines skipped to keep up" in text
    assert "line 04999" in text
    assert len(text) < 12_000


def test_text_view_prints_ranks_warnings_and_final_state() -> None:
    m = MonitorModel(JobHeader(name="mnist", shape=JobShape(nodes=2)), rdma_requested=True)
    out = io.StringIO()
    view = TextView(m, out, metric_every=0)
    view.show()
    m.set_state("Running", T0)
    m.feed_text(format_rank_line(1, "hello"), T0 + 1)
    m.feed_text(format_rank_line(1, "h:1:1 [0] NCCL INFO NET/IB : No device found."), T0 + 1)
    m.feed_text(format_rank_line(1, "h:1:1 [0] NCCL INFO Using network Socket"), T0 + 1)
    m.feed_text(format_rank_line(1, format_record({"type": "metric", "step": 3, "loss": 0.25})), 0)
    progress = {"type": "metric", "step": 4, "total": 8, "t": T0 + 2}  # no values: progress only
    m.feed_text(format_rank_line(1, format_record(progress)), T0 + 2)
    view.update(T0 + 2)
    m.set_state("Succeeded", T0 + 75)
    view.close(T0 + 80)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[ktrain] mnist · PyTorchJob on local · Pending")
    assert "[ktrain] mnist: Running" in lines
    assert "[rank1]: hello" in lines
    assert "[ktrain] NCCL transport: NET/Socket (TCP sockets)" in lines
    assert any(x.startswith("[ktrain] warning: RDMA was requested") for x in lines)
    assert "[ktrain] metrics (rank 1 step 3): loss 0.25 · 62.5% (5/8) · ETA unknown" in lines
    assert lines[-1] == "[ktrain] mnist Succeeded after 1m 15s"


def test_make_view_falls_back_to_text_outside_a_kernel() -> None:
    view = make_view(_job(), prefer_widgets=True, out=io.StringIO())
    assert isinstance(view, TextView)


def test_each_plot_has_its_own_legend_and_a_rank_keeps_its_colour(traffic: CommBytes) -> None:
    """Two metrics: two legends (each beside its panel), rank N drawn in the colour of its
    ``[rankN]`` log label in every panel."""
    m = _job()
    view = MonitorView(m, clock=lambda: T0 + 5)
    for step in range(3):
        for r in (0, 1):
            rec = {"type": "metric", "step": step, "loss": 1.0 / (step + 1), "lr": 0.1 * r}
            m.feed_text(format_rank_line(r, format_record(rec)), T0 + step, node=0)
    m.feed_text(format_rank_line(1, "hello"), T0 + 4, node=0)
    view.update(T0 + 5)
    loss, lr = view.traces("loss"), view.traces("lr")
    assert {t.panel for t in loss} != {t.panel for t in lr}  # one legend per plot
    assert len({t.panel for t in loss}) == 1
    titles = {view._plot.title(t.panel) for t in (loss[0], lr[0])}
    assert titles == {"loss", "lr"}
    sent = {p["title"]: [t["label"] for t in p["traces"]] for p in view._plot.fig.panels}
    assert sent == {"loss": ["rank 0", "rank 1"], "lr": ["rank 0", "rank 1"]}  # legends
    for rank in (0, 1):
        colours = {t.colour for t in (*loss, *lr) if t.label == f"rank {rank}"}
        assert len(colours) == 1, colours
    rank1 = next(t.colour for t in loss if t.label == "rank 1")
    assert f'<span style="color:{rank1}">[rank1]</span> hello' in view._chunks[0].value


def test_cancel_button_tells_the_truth_to_the_end() -> None:
    m = _job()
    view = MonitorView(m, on_cancel=lambda: None, clock=lambda: T0)
    view.cancelling()
    assert (view.cancel_button.description, view.cancel_button.disabled) == ("Cancelling…", True)
    m.set_state("Cancelled", T0 + 1)
    view.update(T0 + 1)
    assert (view.cancel_button.description, view.cancel_button.disabled) == ("Cancelled", True)
    other = MonitorView(_job(), on_cancel=lambda: None, clock=lambda: T0)
    other.cancelling()
    other.cancel_failed()  # the cancel did not go through: a live Cancel again
    assert (other.cancel_button.description, other.cancel_button.disabled) == ("Cancel", False)
    other.model.set_state("Succeeded", T0 + 1)
    other.close(T0 + 1)
    assert (other.cancel_button.description, other.cancel_button.disabled) == ("Cancel", True)


def test_header_shows_percent_done_time_left_and_a_progress_bar() -> None:
    m = _job()
    view = MonitorView(m, clock=lambda: T0 + 30)
    for step in range(0, 11):
        rec = {"type": "metric", "rank": 0, "step": step, "total": 50, "t": T0 + 2 * step}
        m.feed_text(format_rank_line(0, format_record(rec)), T0 + 2 * step, node=0)
    view.update(T0 + 25)  # 5 s after the step-10 record: 78 s left then, 73 s now
    assert "Running 25s · 22% (11/50) · 1m 13s left <progress" in view.header.value
    assert '<progress value="22" max="100"></progress>' in view.header.value


def test_a_resume_is_a_notice_and_a_marker_in_every_metric_panel(traffic: CommBytes) -> None:
    m = _job()
    view = MonitorView(m, flush_interval=0, plot_interval=0)
    _feed(m, 40)  # steps 0-39
    resume = {"type": "resume", "rank": 0, "step": 30, "file": "step-30.pt", "world_size": 4}
    m.feed_text(format_rank_line(0, format_record(resume)), T0 + 5, node=0)
    _feed(m, 20, T0 + 6, first=31)  # the resumed run reports steps 31-50
    view.update(T0 + 7)
    assert "↻ resumed from step 30 (checkpoint step-30.pt)" in view.alerts.value
    assert "⚠" not in view.alerts.value.split("resumed")[0].rsplit("<div", 1)[-1]
    xs = [list(t.x) for t in view.traces("loss")]
    assert all(len(x) == len(set(x)) for x in xs)  # no step twice in any rank's trace
    (panel,) = view._plot.fig.panels
    (line,) = panel["markers"]  # a dotted line at step 30 in the loss panel
    assert (line["x"], panel["id"]) == (30, view.traces("loss")[0].panel)
    assert line["text"] == "resumed from step 30"  # shown on hover
