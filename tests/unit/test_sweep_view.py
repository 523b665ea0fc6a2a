"""A sweep's views from its record: the view the cell's widget draws and the side panel's
payloads (the same rows, states and best), the widget itself fed record after record."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from jupyter_ktrain.server.sweep_payloads import sweep_detail, sweep_summary
from jupyter_ktrain.store.sweeps import SweepRecord
from jupyter_ktrain.sweep.record import DONE, RUNNING, make_record, row_of, running_row
from jupyter_ktrain.sweep.trials import Trial
from jupyter_ktrain.sweep.view import sweep_view
from jupyter_ktrain.sweep_spec.sweep_options import SweepOptions
from jupyter_ktrain.widgets.html import strip_tags
from jupyter_ktrain.widgets.sweep import SweepWidget, table_html

OPTIONS = SweepOptions.create(["lr=loguniform(1e-4,1e-1)", "opt=choice('adam','sgd')"],
                              "loss:min", trials=5, parallel=2)  # fmt: skip


def _record(state: str = RUNNING, **changes: Any) -> SweepRecord:
    failed = Trial(1, {"lr": 0.01, "opt": "sgd"}, "Failed", None, "s-t1",
                   error="ValueError: lr too high\nTraceback ...")  # fmt: skip
    pruned = Trial(2, {"lr": 0.0002, "opt": "sgd"}, "Pruned", 3.0, "s-w1", run=2,
                   error="loss 3 at step 5 is worse than the other trials' median 0.7")  # fmt: skip
    ended = [
        row_of(Trial(0, {"lr": 0.001, "opt": "adam"}, "Succeeded", 0.5, "s-t0"), 1.0, 4.0),
        row_of(failed, 1.0, 2.0),
        row_of(pruned, 4.0, 6.0),
    ]
    live = running_row(3, {"lr": 0.003, "opt": "adam"}, "s-t3", None, 5.0, 0.4)
    curves = {0: {s: 1.0 / (s + 1) for s in range(1200)}, 3: {0: 0.9, 1: 0.4}}
    record = make_record("s", "local", OPTIONS, False, 1.0, state, [*ended, live], curves)
    raw = {**json.loads(json.dumps(record.to_json())), **changes}
    return SweepRecord.from_json(raw)  # as a reader gets it from the store


def test_the_view_has_a_row_per_trial_the_best_marked_and_each_curve() -> None:
    view = sweep_view(_record(), points=100)
    assert view.names == ("lr", "opt")
    assert [(r.number, r.params, r.state) for r in view.rows] == [
        (0, ("0.001", "adam"), "Succeeded"),
        (1, ("0.01", "sgd"), "Failed"),
        (2, ("0.0002", "sgd"), "Pruned"),
        (3, ("0.003", "adam"), "Running"),
    ]
    assert [r.objective for r in view.rows] == ["0.5", "-", "3", "0.4"]  # so far, when running
    assert [r.best for r in view.rows] == [True, False, False, False]
    assert view.rows[1].reason == "ValueError: lr too high"  # its first line
    assert view.rows[2].reason.startswith("loss 3 at step 5 is worse")
    assert (view.rows[0].reason, view.rows[3].reason) == ("", "")
    assert view.rows[2].where == "s-w1 run 2"
    assert (view.done, view.total, view.running) == (3, 5, 1)
    assert view.header == (
        "Sweep 's' · Running · 3 of 5 trials done, 1 running · best: trial 0, loss=0.5 "
        "(lr=0.001, opt=adam)"
    )
    assert [(c.trial, c.label) for c in view.curves] == [(0, "trial 0"), (3, "trial 3")]
    assert len(view.curves[0].x) == 100  # 1200 steps, downsampled
    assert (view.curves[0].x[0], view.curves[0].x[-1]) == (0.0, 1199.0)
    assert view.curves[1].y == (0.9, 0.4)
    assert view.curves[0].colour == view.rows[0].colour != view.rows[3].colour


def test_a_record_whose_writer_is_gone_shows_its_running_trials_interrupted() -> None:
    gone = int(Path("/proc/sys/kernel/pid_max").read_text())
    view = sweep_view(_record(pid=gone))
    assert view.state == "Interrupted"
    assert [r.state for r in view.rows][-1] == "Interrupted"
    assert (view.done, view.running) == (4, 0)


def test_the_panels_payloads_say_what_the_cells_table_says() -> None:
    record = _record()
    summary = sweep_summary(record)
    assert (summary["state"], summary["done"], summary["total"], summary["best"]) == (
        "Running", 3, 5, 0
    )  # fmt: skip
    assert summary["best_objective"] == 0.5
    assert summary["best_text"] == "trial 0, loss=0.5 (lr=0.001, opt=adam)"
    detail = json.loads(json.dumps(sweep_detail(record, points=50)))  # as it goes on the wire
    assert detail["names"] == ["lr", "opt"]
    assert [r["state"] for r in detail["rows"]] == ["Succeeded", "Failed", "Pruned", "Running"]
    assert [c["trial"] for c in detail["curves"]] == [0, 3]
    assert len(detail["curves"][0]["x"]) == 50
    # the cell's table: the same rows, states, values and best, in the same words
    table = table_html(sweep_view(record))
    text = strip_tags(table)
    for row in detail["rows"]:
        assert f"{row['state']}{row['objective']}{row['where']}{row['reason']}" in text
    assert text.count("★") == 1
    for row in detail["rows"]:  # each state in its colour, the panel's
        assert f';color:{row["state_colour"]}">{row["state"]}</td>' in table
    assert all(tag.count("style=") <= 1 for tag in re.findall(r"<[^>]+>", table))
    assert "★ 0" in text


def test_the_widget_draws_each_record_and_folds_the_lines_said() -> None:
    widget = SweepWidget("s")
    assert {"ktrain-open-sweep", "ktrain-sweep-s"} <= set(widget.panel_button._dom_classes)
    widget.update(_record())
    assert widget.live
    assert "3 of 5 trials done" in widget.header.value
    assert widget.table.value == table_html(sweep_view(_record()))
    widget.say("trial 3 started on 's-t3': lr=0.003, opt='adam'")
    widget.say("trial 3 Succeeded, loss=0.4")
    assert widget.log_box.selected_index is None  # folded
    assert widget.log_box.get_title(0) == "log (2 lines): trial 3 Succeeded, loss=0.4"
    assert "trial 3 started" in widget.log.value
    done = _record(DONE)
    last = replace(done.rows[3], state="Succeeded", objective=0.25, ended=7.0)
    done = replace(done, rows=(*done.rows[:3], last), best=3)
    widget.update(done)  # the last record: the chart is drawn, waiting for it if need be
    assert not widget.live
    assert "Done · 5 of 5" not in widget.header.value  # 4 of the 5 asked ran
    assert "4 of 5 trials done · best: trial 3, loss=0.25" in widget.header.value
    assert widget._plot is not None
    traces = widget._plot.traces("objective")
    assert [t.label for t in traces] == ["trial 0", "trial 3"]
    assert len(traces[0].x) == 500  # the view's most points
    assert traces[1].y == (0.9, 0.4)
    assert 'data-number="3" data-state="Succeeded"' in widget.table.value
    assert 'class="ktrain-SweepRow ktrain-mod-best"' in widget.table.value
