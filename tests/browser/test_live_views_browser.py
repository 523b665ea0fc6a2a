"""One live truth in a real browser: the cell's widget and the side panel, side by side.

A notebook runs a 2 x 2 local job (checkpoints every 5 steps) under Run All while the job's
tab is open beside it and the "ktrain jobs" list is in the sidebar. After the checkpoint of
step 9 the test kills node 1's process with SIGKILL (as notebook 04 does); the job restarts
and resumes. Every 200 ms the page samples the widget's header and alerts, the job tab's
header and replica line, and the list's row. The test fails when:

- the widget and the panel disagree on the job's state or its steps done for more than 1.5 s
  (a value the panel shows was not in the widget within 1.5 s of it, either side);
- the widget's header does not change for 2 s while the job runs (its clock ticks every
  second: a frozen header is a stalled widget);
- an ETA says "0s left" with steps to go (a restart says "restarting"/"waiting" instead);
- the widget and the panel word the restart differently, or do not end at 100% (60/60).

It also checks what the layout shows: the list's name column shows the whole name at the
default sidebar width, and the widget's chart fits its output area. Screenshot:
test-artifacts/live-views.png. The lab loads this checkout's built labextension.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_ktrain.backends.local import LocalBackend

from .test_widget_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Lab,
    panel_lab,
    screenshot,
    wait_kernel_idle,
)

pytestmark = pytest.mark.slow

STEPS = 60
LAG_S = 1.5  # the most one view may trail the other
FROZEN_S = 2.0

TRAIN = """import time

import torch
import torch.distributed as dist

import jupyter_ktrain as ktrain


def train(steps, every=5, pause=0.15):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    ckpt = ktrain.checkpoint()
    found = ckpt.load()
    start = 0 if found is None else found[1] + 1
    if found is not None:
        model.load_state_dict(found[0])
    for step in range(start, steps):
        x = torch.randn(8, 4)
        loss = torch.nn.functional.mse_loss(ddp(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ktrain.report(step=step, total=steps, loss=loss.item())
        if step % every == every - 1:
            ckpt.save(model.state_dict(), step)
        time.sleep(pause)
    dist.destroy_process_group()
    return start
"""

# every 200 ms: [ms, widget header, widget alerts, tab header, tab replicas, list row]
SAMPLER = """(name) => {
  const text = el => (el ? el.textContent : '');
  window.__ktrainLive = [];
  window.__ktrainLiveTimer = setInterval(() => {
    const header = [...document.querySelectorAll('.widget-html-content')]
      .find(e => e.textContent.includes('●') && e.textContent.includes(name));
    const alerts = [...document.querySelectorAll('.widget-html-content')]
      .filter(e => e.textContent.includes('restarted')).map(text).join(' | ');
    const tab = document.getElementById('ktrain-job-' + name);
    const row = document.querySelector(`#ktrain-jobs-panel .ktrain-JobRow[data-name="${name}"]`);
    window.__ktrainLive.push([Date.now(), text(header), alerts,
      text(tab && tab.querySelector('.ktrain-JobHeader')),
      text(tab && tab.querySelector('.ktrain-Replicas')), text(row)]);
  }, 200);
}"""
NAME_CELL = """(name) => {
  const row = `#ktrain-jobs-panel .ktrain-JobRow[data-name="${name}"]`;
  const td = document.querySelector(row + ' .ktrain-Name');
  return td ? [td.clientWidth, td.scrollWidth, td.textContent] : null;
}"""
CHART_FIT = """() => {
  const gd = document.querySelector('.jp-OutputArea-output .ktrain-WidgetChart');
  const area = gd && gd.closest('.jp-OutputArea-output');
  return gd ? [gd.getBoundingClientRect().width, area.getBoundingClientRect().width] : null;
}"""

STATE = re.compile(r"\b(Pending|Queued|Running|Succeeded|Failed|Cancelled)\b")
DONE = re.compile(r"\((\d+)/(\d+)\)")
ZERO_LEFT = re.compile(r"(?<!\d)0s left")  # not 10s, 1m 00s


@pytest.fixture
def live_lab(tmp_path: Path) -> Iterator[Lab]:
    with panel_lab(tmp_path) as lab:
        yield lab


def _notebook(path: Path, name: str) -> None:
    cells = [
        new_code_cell("%load_ext jupyter_ktrain"),
        new_code_cell(TRAIN),
        new_code_cell(
            f"%%ktrain --nodes 2 --procs-per-node 2 --name {name}\nstart = train({STEPS})"
        ),
    ]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)


def _kill_node_after_checkpoint(job_dir: Path, step: int = 9, timeout: float = 60) -> None:
    """SIGKILL node 1's process once the checkpoint of ``step`` exists (notebook 04's fault)."""
    deadline = time.monotonic() + timeout
    while not (job_dir / "checkpoints" / f"step-{step}.pt").exists():
        assert time.monotonic() < deadline, "no checkpoint of step 9 came"
        time.sleep(0.05)
    pid = json.loads((job_dir / "state.json").read_text())["nodes"][1]["pid"]
    os.kill(pid, signal.SIGKILL)


def _value(text: str) -> tuple[str, int | None]:
    """(state, steps done) as a header shows them."""
    state, done = STATE.search(text), DONE.search(text)
    return (state.group(1) if state else "", int(done.group(1)) if done else None)


def disagreements(samples: list[list[Any]], lag_s: float = LAG_S) -> list[str]:
    """Each sample where one view's state is not one the other showed within ``lag_s`` of it,
    or its steps done lie outside what the other showed then (a view trailing the other by
    more than ``lag_s``; a view may skip steps between two samples). Within ``lag_s`` of the
    first sample, what the other view showed before sampling began is unknown: a view there
    is only held to not being ahead of the other (and within ``lag_s`` of the last, to not
    being behind): a tab whose first poll's value is on screen as sampling starts is not
    said to trail a widget whose earlier values were never seen."""
    ms = lag_s * 1000
    first, last = samples[0][0], samples[-1][0]
    bad = []
    for t, widget, _a, tab, *_rest in samples:
        for mine, theirs_at in ((tab, 1), (widget, 3)):
            state, done = _value(mine)
            if not state or done is None:
                continue
            near = [_value(s[theirs_at]) for s in samples if abs(s[0] - t) <= ms]
            # a running view that shows no progress yet has done no step: the other view's
            # first step may come a poll before this one's
            steps = [d if d is not None else 0 for st, d in near if d is not None or st]
            seen_before, seen_after = t - ms >= first, t + ms <= last
            if not steps:
                bad.append(f"{t}: {mine!r} vs {sorted(set(map(str, near)))}")
                continue
            known = state in {st for st, _ in near} or not (seen_before and seen_after)
            behind = done < min(steps) and seen_before
            ahead = done > max(steps) and seen_after
            if not known or behind or ahead:
                bad.append(f"{t}: {mine!r} vs {sorted(set(map(str, near)))}")
    return bad


def _frozen(samples: list[list[Any]]) -> list[str]:
    """Stretches over FROZEN_S in which the widget's header stayed the same while running."""
    running = [(t, w) for t, w, *_ in samples if _value(w)[0] == "Running"]
    out, since = [], 0
    for i in range(1, len(running)):
        if running[i][1] != running[since][1]:
            since = i
        elif running[i][0] - running[since][0] > FROZEN_S * 1000:
            out.append(f"{running[since][1]!r} from {running[since][0]} to {running[i][0]}")
    return out


def test_widget_and_panel_show_one_truth_through_a_killed_node(live_lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    lab, name = live_lab, f"live-{int(time.time()) % 100000}"
    _notebook(lab.root / "live.ipynb", name)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        try:
            page.goto(f"{lab.url}/lab/tree/live.ipynb?reset&token={lab.token}")
            wait_kernel_idle(page)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_function(
                f"() => [...document.querySelectorAll('.widget-html-content')]"
                f".some(e => e.textContent.includes('{name}'))",
                timeout=60_000,
            )
            page.evaluate("() => window.jupyterapp.commands.execute('ktrain:open-panel')")
            page.evaluate(
                f"() => window.jupyterapp.commands.execute('ktrain:open-job', "
                f"{{name: '{name}', mode: 'split-right'}})"
            )
            page.evaluate(f"(name) => ({SAMPLER})(name)", name)
            _kill_node_after_checkpoint(LocalBackend(lab.home).job_dir(name))
            page.wait_for_function(
                "() => window.__ktrainLive.some(s => s[1].includes('Succeeded') "
                "&& s[3].includes('Succeeded'))",
                timeout=90_000,
            )
            time.sleep(1.0)  # the last samples of the ended job
            samples = page.evaluate(
                "() => { clearInterval(window.__ktrainLiveTimer); return window.__ktrainLive; }"
            )
            name_cell = page.evaluate(f"(name) => ({NAME_CELL})(name)", name)
            chart = page.evaluate(CHART_FIT)
            screenshot(page, "live-views.png")
        except Exception:
            screenshot(page, "live-views-failed.png")
            raise
        finally:
            browser.close()
    (ARTIFACTS / "live-views-samples.json").write_text(json.dumps(samples, indent=0))
    _check(samples, name_cell, chart, name)


def _check(samples: list[list[Any]], name_cell: Any, chart: Any, name: str) -> None:
    widget = [s[1] for s in samples]
    assert any("Running" in w for w in widget), widget[:5]
    assert not (bad := disagreements(samples)), "\n".join(bad[:10])
    assert not (stuck := _frozen(samples)), "widget froze:\n" + "\n".join(stuck[:5])
    for view in (1, 3, 5):
        zero = [s[view] for s in samples if ZERO_LEFT.search(s[view])]  # steps to go
        assert not zero, zero[:3]
    # the restart happened, and the widget's alert and the panel's replica line word it alike
    said = [s[2] for s in samples if "restarted" in s[2]]
    assert said, "the widget never said a node restarted"
    restart = re.search(rf"{name}-node-1 restarted [^|]*?\(restart 1[^)]*\)", said[-1])
    assert restart, said[-1]
    assert any(restart.group(0) in s[4] for s in samples), (restart.group(0), samples[-1][4])
    assert f"100% ({STEPS}/{STEPS})" in samples[-1][1], samples[-1][1]
    assert f"100% ({STEPS}/{STEPS})" in samples[-1][3], samples[-1][3]
    # the list shows the whole name at the default sidebar width; the chart fits its cell
    assert name_cell is not None
    width, needs, text = name_cell
    assert text == name
    assert width >= 60, name_cell
    assert needs <= width + 1, name_cell  # not cut
    assert chart is not None
    assert chart[0] <= chart[1] + 1, chart
