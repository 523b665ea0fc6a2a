"""The "ktrain jobs" side panel in a real JupyterLab + Chromium (Playwright).

A job finished before the page was opened is listed; a notebook cell runs another job and its
widget's "Open in side panel" button reveals the panel and opens that job's tab, whose Cancel
button stops it; the list survives a kernel restart; the earlier job's tab shows every rank's
lines and its loss chart; the panel asks nothing while hidden.
The lab loads this checkout's built extension (``jupyter_ktrain/labextension``, built by
``make setup``) and enables the server extension with the config file the package installs.
Screenshot: test-artifacts/panel.png.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from tests.jupyter_process import jupyter_app

from ..integration.widget_notebook import save_notebook
from ..panel_failed import FAILED, LAST_LINE, write_failed_job
from ..panel_jobs import TRAIN, run_job
from .test_widget_browser import (
    ARTIFACTS,
    BUILT,
    CHROMIUM,
    CHROMIUM_ARGS,
    HEADER,
    ROOT,
    Lab,
    lab_env,
    require_panel_browser,
    screenshot,
    wait_kernel_idle,
)

pytestmark = pytest.mark.slow

EARLIER = "panel-earlier"
CELL_JOB = "panel-cell"


@pytest.fixture
def panel_lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """JupyterLab with this checkout's labextension; the server extension is enabled by the
    package's config file unless the test is marked ``without_server_extension``."""
    server_ext = request.node.get_closest_marker("without_server_extension") is None
    require_panel_browser()
    home = tmp_path / "ktrain-home"
    if server_ext:
        # before JupyterLab starts: "started earlier"; its ranks print in turn
        run_job(home, EARLIER, nodes=2, steps=5, pause=0.3)
        write_failed_job(home)
    token = secrets.token_hex(16)
    root, config, env = lab_env(tmp_path, home, labextension=BUILT)
    if server_ext:
        env["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter-config")
    else:  # an installed package enables it in the environment's config: the user's wins
        off = '{"ServerApp": {"jpserver_extensions": {"jupyter_ktrain": false}}}'
        (config / "jupyter_server_config.json").write_text(off)
    with jupyter_app("lab", root, env, tmp_path / "lab.log", token) as url:
        yield Lab(url, token, root, home)


def _notebook(path: Path) -> None:
    save_notebook(
        path,
        "%load_ext jupyter_ktrain",
        TRAIN,
        f"%%ktrain --nodes 2 --procs-per-node 1 --name {CELL_JOB}\nr = train(400, 0.3)",
    )


ROWS = """() => [...document.querySelectorAll('#ktrain-jobs-panel .ktrain-JobRow')]
  .map(r => r.dataset.name + ':' + r.dataset.state)"""
PROGRESS = """() => [...document.querySelectorAll('#ktrain-jobs-panel .ktrain-JobRow')]
  .map(r => r.dataset.name + ':' + r.querySelector('.ktrain-Progress').textContent)"""
NB_KERNEL = """() => [...window.jupyterapp.shell.widgets('main')]
  .find(w => w.sessionContext).sessionContext.session.kernel"""
PANEL_VISIBLE = """() => { const p = document.getElementById('ktrain-jobs-panel');
  return !!p && !p.classList.contains('lm-mod-hidden') && p.offsetWidth > 0; }"""


def _rows(page: Any) -> dict[str, str]:
    return dict(r.split(":", 1) for r in page.evaluate(ROWS))


def _tab_text(page: Any, name: str) -> str:
    return str(page.locator(f"#ktrain-job-{name} .ktrain-Logs").inner_text())


def test_panel_lists_jobs_survives_restart_and_opens_every_ranks_logs(panel_lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    lab = panel_lab
    _notebook(lab.root / "panel.ipynb")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        api_calls: list[str] = []
        page.on("request", lambda r: api_calls.append(r.url) if "/ktrain/api/" in r.url else None)
        try:
            page.goto(f"{lab.url}/lab/tree/panel.ipynb?reset&token={lab.token}")
            wait_kernel_idle(page)
            _steps(page)
            screenshot(page, "panel.png")
            _polls_only_while_visible(page, api_calls)
        except Exception:
            screenshot(page, "panel-failed.png")
            raise
        finally:
            browser.close()
            if (lab.home / "jobs" / CELL_JOB).exists():
                LocalBackend(lab.home).cancel(CELL_JOB)


def _steps(page: Any) -> None:
    # the cell's job runs; its widget's "Open in side panel" button reveals the panel
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    button = page.locator(f".ktrain-open-panel.ktrain-job-{CELL_JOB}")
    button.wait_for(state="visible", timeout=60_000)
    page.wait_for_function(
        "() => document.body.innerText.includes('rank 1 step 2 hello')", timeout=60_000
    )
    # every status the notebook's kernel connection takes from here on, with its time (ms)
    page.evaluate(
        f"""() => {{ const k = ({NB_KERNEL})(), seen = [[k.status, performance.now()]];
               window.ktrainStatuses = seen;
               k.statusChanged.connect((_, s) => seen.push([s, performance.now()])); }}"""
    )
    button.click()
    page.wait_for_function(PANEL_VISIBLE, timeout=10_000)
    page.wait_for_function(
        f"() => ({ROWS})().some(r => r.startsWith('{CELL_JOB}:'))", timeout=15_000
    )
    rows = _rows(page)
    assert rows[EARLIER] == "Succeeded"
    assert page.locator(f"#ktrain-jobs-panel .ktrain-JobRow[data-name='{CELL_JOB}']")\
        .get_attribute("class").count("ktrain-mod-highlighted") == 1  # fmt: skip
    # ... and opened the running job's tab, whose log pane fills in incrementally
    page.wait_for_function(
        f"""() => {{ const t = document.querySelector('#ktrain-job-{CELL_JOB} .ktrain-Logs');
           return !!t && t.innerText.includes('[rank0] rank 0 step 1 hello')
                      && t.innerText.includes('[rank1] rank 1 step 1 hello'); }}""",
        timeout=20_000,
    )
    assert _rows(page)[CELL_JOB] == "Running"
    # the click went to the kernel's control subshell, yet the kernel reads busy while the
    # cell follows its job. Each request handled beside the cell ends with an idle of its own
    # (the protocol has one status per request); the kernel sends the cell's busy right behind
    # it, and the two reach the page as two websocket messages, a few ms apart (up to 46 ms
    # seen on 2 loaded cores). The status bar may blink for that long, never stay idle.
    page.wait_for_timeout(300)
    assert page.evaluate(f"() => ({NB_KERNEL})().status") == "busy"
    seen = page.evaluate("() => window.ktrainStatuses")
    assert seen[0][0] == "busy", seen
    assert seen[-1][0] == "busy", seen
    idle = [(at, seen[i + 1][1] - at) for i, (s, at) in enumerate(seen[:-1]) if s == "idle"]
    assert all(ms < 250 for _at, ms in idle), idle
    # the widget's button label is whole, not cut off
    width = button.evaluate("b => [b.scrollWidth, b.clientWidth]")
    assert width[0] <= width[1] + 1, width
    # percent done in the list (and a time left once a few steps were timed), and in the tab
    page.wait_for_function(
        f"() => ({PROGRESS})().some(r => /^{CELL_JOB}:\\d+(\\.\\d)?% · \\d+[smhd]$/.test(r))",
        timeout=30_000,
    )
    page.locator(f"#ktrain-job-{CELL_JOB} .ktrain-JobHeader").filter(
        has_text=re.compile(r"Running · \d+(\.\d)?% \(\d+/400\) · ")
    ).wait_for(timeout=10_000)
    assert f"{EARLIER}:100%" in page.evaluate(PROGRESS)
    screenshot(page, "panel-running.png")
    # the tab's Cancel button stops it; the widget in the cell and the panel both see it end,
    # as Cancelled: its own final state, not a failure
    page.locator(f"#ktrain-job-{CELL_JOB} .ktrain-Cancel").click()
    page.wait_for_function(f"() => ({ROWS})().includes('{CELL_JOB}:Cancelled')", timeout=30_000)
    header = page.locator(f"#ktrain-job-{CELL_JOB} .ktrain-JobHeader")
    header.filter(has_text="Cancelled").wait_for(timeout=10_000)
    assert "Failed" not in header.inner_text()
    tab_cancel = page.locator(f"#ktrain-job-{CELL_JOB} .ktrain-Cancel")
    assert tab_cancel.is_disabled()
    assert tab_cancel.inner_text() == "Cancelled"
    failure = page.locator(f"#ktrain-job-{CELL_JOB} .ktrain-Failure")
    failure.filter(has_text="was cancelled by the user").wait_for(timeout=10_000)
    page.wait_for_function(f"() => ({HEADER})().includes('Cancelled')", timeout=30_000)
    assert "Failed" not in page.evaluate(HEADER)
    widget_cancel = page.locator(".widget-button", has_text="Cancelled")
    widget_cancel.wait_for(state="attached", timeout=10_000)  # (the notebook tab is behind)
    assert widget_cancel.is_disabled()
    page.wait_for_function(f"() => ({NB_KERNEL})().status === 'idle'", timeout=30_000)
    # restart the kernel: the list is still there
    page.evaluate(f"async () => {{ const k = ({NB_KERNEL})(); await k.restart(); }}")
    page.wait_for_function(f"() => ({NB_KERNEL})().status === 'idle'", timeout=60_000)
    page.locator("#ktrain-jobs-panel .ktrain-Refresh").click()
    page.wait_for_timeout(500)
    assert _rows(page) == {CELL_JOB: "Cancelled", EARLIER: "Succeeded", FAILED: "Failed"}
    # a failed job's tab opens with why: the first failing rank, its code and last lines
    page.locator(f"#ktrain-jobs-panel .ktrain-JobRow[data-name='{FAILED}']").click()
    first = page.locator(f"#ktrain-job-{FAILED} > :nth-child(2)")
    first.filter(has_text=LAST_LINE).wait_for(timeout=15_000)
    assert "ktrain-Failure" in (first.get_attribute("class") or "")
    said = f"Job {FAILED!r} failed: rank 1 raised {LAST_LINE}; rank 0 was stopped"
    assert said in first.inner_text()
    # the earlier job's tab: every rank's lines, its loss chart, Cancel disabled (it ended)
    page.locator(f"#ktrain-jobs-panel .ktrain-JobRow[data-name='{EARLIER}']").click()
    page.wait_for_function(
        f"""() => {{ const t = document.querySelector('#ktrain-job-{EARLIER} .ktrain-Logs');
           return !!t && t.innerText.includes('rank 1 step 5 hello'); }}""",
        timeout=15_000,
    )
    text = _tab_text(page, EARLIER)
    for rank in (0, 1):
        for step in range(1, 6):
            assert f"[rank{rank}] rank {rank} step {step} hello" in text, text
    # "all ranks" reads like one log: the two nodes' lines merged by time, not file by file
    assert text.index("[rank1] rank 1 step 1 hello") < text.index("[rank0] rank 0 step 4 hello")
    assert text.index("[rank0] rank 0 step 1 hello") < text.index("[rank1] rank 1 step 4 hello")
    page.wait_for_selector(f"#ktrain-job-{EARLIER} .ktrain-Chart polyline", timeout=15_000)
    # the loss chart (each rank's step time has one too: checked below)
    charts = page.locator(f"#ktrain-job-{EARLIER} .ktrain-Chart")
    assert charts.evaluate_all("cs => cs.map(c => c.dataset.metric)") == ["loss", "step time (s)"]
    chart = page.locator(f"#ktrain-job-{EARLIER} .ktrain-Chart[data-metric='loss']")
    labels = chart.locator("polyline").evaluate_all(
        "ps => ps.map(p => p.dataset.label + '=' + p.dataset.points)"
    )
    assert sorted(labels) == ["rank 0=5", "rank 1=5"]
    # readable ticks (round values, more than the two ends) and one legend per chart
    assert chart.locator(".ktrain-XTick").count() >= 3
    assert chart.locator(".ktrain-YTick").count() >= 3
    assert charts.locator(".ktrain-ChartLegend").count() == charts.count()
    # one colour per rank: its log label's colour is its line's colour
    for rank in (0, 1):
        stroke = chart.locator(f"polyline[data-label='rank {rank}']").get_attribute("stroke")
        label = page.locator(f"#ktrain-job-{EARLIER} .ktrain-LogLabel",
                             has_text=f"[rank{rank}]").first  # fmt: skip
        colour = label.evaluate("e => e.style.color")
        assert colour == _rgb(stroke), (rank, stroke, colour)
    assert page.locator(f"#ktrain-job-{EARLIER} .ktrain-Cancel").is_disabled()
    # the rank selector narrows the pane to one rank (the server filters)
    page.locator(f"#ktrain-job-{EARLIER} .ktrain-RankSelect").select_option("1")
    page.wait_for_function(
        f"""() => {{ const t = document.querySelector('#ktrain-job-{EARLIER} .ktrain-Logs');
           const lines = t.innerText.split('\\n').filter(l => l.trim());
           return lines.length === 5 && lines.every(l => l.startsWith('[rank1]')); }}""",
        timeout=10_000,
    )


def _rgb(hex_colour: str | None) -> str:
    """``#d62728`` as the browser reports a style colour: ``rgb(214, 39, 40)``."""
    assert hex_colour is not None
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"


def _polls_only_while_visible(page: Any, api_calls: list[str]) -> None:
    # the running job's tab read its logs incrementally: later reads passed an offset
    logs = [u for u in api_calls if f"/jobs/{CELL_JOB}/logs" in u]
    assert any("offset=" in u for u in logs), logs

    # the jobs list polls while the panel shows; with the file browser in its place, it stops
    def list_calls() -> int:  # ServerConnection adds a cache-busting query
        return sum(bool(re.search(r"/ktrain/api/jobs(\?|$)", u)) for u in api_calls)

    before = list_calls()
    page.wait_for_timeout(3500)
    assert list_calls() > before, api_calls[-5:]
    page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
    page.wait_for_timeout(300)
    hidden_from = len(api_calls)
    page.wait_for_timeout(4000)  # > the 3 s poll period; ended jobs' tabs ask nothing either
    assert api_calls[hidden_from:] == []


@pytest.mark.without_server_extension
def test_panel_says_the_server_extension_is_missing(panel_lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.goto(f"{panel_lab.url}/lab?reset&token={panel_lab.token}")
            page.wait_for_selector("#ktrain-jobs-panel", state="attached", timeout=90_000)
            page.evaluate("() => window.jupyterapp.commands.execute('ktrain:open-panel')")
            status = page.locator("#ktrain-jobs-panel .ktrain-PanelStatus.ktrain-mod-error")
            status.wait_for(timeout=15_000)
            assert "jupyter-ktrain server extension not installed" in status.inner_text()
        finally:
            browser.close()
