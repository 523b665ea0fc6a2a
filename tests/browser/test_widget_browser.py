"""The cell monitor in a real browser: JupyterLab + Chromium (Playwright). A notebook runs a
2 x 2 local job under Run All; the widget shows every rank's lines, its loss plot grows while
the job runs, the header ends Succeeded, and the notebook's kernel indicator reads busy all the
while (JupyterLab 4.6 asks the kernel for a subshell when the widget's first comm opens; that
request's idle must not leave it reading Idle); beside the file browser at 1100 and 900 px its
header is two lines, not more.
A screenshot goes to test-artifacts/."""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from tests.jupyter_process import jupyter_app

from ..integration.widget_notebook import write_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
BUILT = ROOT / "jupyter_ktrain" / "labextension"  # this checkout's side panel, built
SCREENSHOT_TIMEOUT_MS = 15_000


def require_panel_browser() -> None:
    """Skip, saying what is missing, unless Chromium, Playwright and this checkout's built
    side panel are here (a browser test of the panel needs all three)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed at {CHROMIUM} (.ci/run installs it)")
    if not (BUILT / "package.json").exists():
        pytest.skip("the labextension is not built: `make setup` builds it (needs npm)")
    pytest.importorskip("playwright.sync_api")


def _chromium_descendants() -> list[int]:
    """The pids of this test's Chromium processes (its descendants named chrom...)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(stat.parent.name)
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(pid)
    todo, mine = [os.getpid()], []
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            with contextlib.suppress(OSError):
                if "chrom" in Path(f"/proc/{child}/comm").read_text():
                    mine.append(child)
    return mine


def favour_browser() -> RendererCpu:
    """Schedule this test's Chromium processes ahead of the rest of the machine (nice -10),
    as a user's browser has a CPU of its own: on two cores shared with the jobs' ranks and the
    other stream's test cluster, a main-thread task's time was mostly time the renderer
    waited for a core (a 70 ms task here read 228 ms in CI). A test that times the page's
    tasks calls it once the page has loaded (its renderer exists). Without the right to raise
    a priority (not root) it changes nothing, and the test times as before.

    It returns the renderers' CPU clock (started): what a task cost the page is the time its
    renderer's main thread ran in it, not the time it waited for a core (which nice -10 does
    not remove: a task under 50 ms here read 234 ms in CI while the other stream's cluster ran)."""
    for pid in _chromium_descendants():
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, -10)
    return RendererCpu().start()


class RendererCpu:
    """The time each Chromium renderer's main thread ran on a CPU, sampled every 10 ms from
    ``/proc/PID/task/PID/schedstat`` (its first field: nanoseconds on a CPU) against the wall
    clock. ``ran_ms(start, end)`` (epoch ms: a Long Task's ``timeOrigin + startTime``) says
    how long the busiest renderer ran in that span: a task's own cost, where its wall time also
    counts the time it waited for a core. ``None`` where the kernel keeps no such figures."""

    PERIOD_S = 0.01

    def __init__(self) -> None:
        self.samples: dict[int, list[tuple[float, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> RendererCpu:
        for pid in _chromium_descendants():
            with contextlib.suppress(OSError):
                if "--type=renderer" in Path(f"/proc/{pid}/cmdline").read_text():
                    self.samples[pid] = []
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _sample(self) -> None:
        while not self._stop.is_set():
            for pid, samples in self.samples.items():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    ran = int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0])
                    samples.append((time.time() * 1000, ran))
            self._stop.wait(self.PERIOD_S)

    def ran_ms(self, start: float, end: float) -> float | None:
        def at(samples: list[tuple[float, int]], t: float) -> float:
            before = [s for s in samples if s[0] <= t] or samples[:1]
            after = [s for s in samples if s[0] >= t] or samples[-1:]
            (t0, r0), (t1, r1) = before[-1], after[0]
            return r0 if t1 == t0 else r0 + (r1 - r0) * (t - t0) / (t1 - t0)

        spans = [
            (at(s, end) - at(s, start)) / 1e6
            for s in self.samples.values()
            if len(s) >= 2 and s[0][0] <= start and end <= s[-1][0]
        ]
        return max(spans) if spans else None

    def cost_ms(self, origin: float, start: float, wall: float) -> float:
        """A Long Task's cost: its renderer's time on a CPU, or its wall time where that is
        not known (``origin``: the page's ``performance.timeOrigin``)."""
        ran = self.ran_ms(origin + start, origin + start + wall)
        return wall if ran is None else min(wall, ran)


def screenshot(page: Any, name: str, **options: Any) -> None:
    """A picture of the page into test-artifacts/, for a person to look at: a record, never a
    check, so a renderer too busy to paint one in time (two cores under a test cluster) is
    said and the test goes on."""
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        page.screenshot(path=str(ARTIFACTS / name), timeout=SCREENSHOT_TIMEOUT_MS, **options)
    except Exception as exc:  # playwright's TimeoutError or Error
        print(f"screenshot {name} not taken: {str(exc).splitlines()[0]}")


LAB_CONFIG = """
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.expose_app_in_browser = True
"""


@dataclass
class Lab:
    url: str
    token: str
    root: Path
    home: Path


def lab_env(
    tmp_path: Path, home: Path, labextension: Path | None = None
) -> tuple[Path, Path, dict[str, str]]:
    """A lab's root and config folders (LAB_CONFIG; no "get notified about Jupyter news?"
    toast over the page) and its environment, with ``home`` as the job store; with
    ``labextension``, that build is the only jupyter-ktrain panel the lab finds."""
    root, config = tmp_path / "root", tmp_path / "config"
    root.mkdir()
    config.mkdir()
    (config / "jupyter_server_config.py").write_text(LAB_CONFIG)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "KTRAIN_HOME": str(home),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    env.pop("KTRAIN_MONITOR", None)
    if labextension is not None:
        data = tmp_path / "data"
        (data / "labextensions").mkdir(parents=True)
        (data / "labextensions" / "jupyter-ktrain").symlink_to(labextension)
        env["JUPYTER_PATH"] = str(data)
    return root, config, env


@contextlib.contextmanager
def panel_lab(tmp_path: Path, home: Path | None = None) -> Iterator[Lab]:
    """JupyterLab with this checkout's labextension and its server extension (enabled by the
    config file the package installs), jobs in its own store (``home``, default under
    ``tmp_path``)."""
    require_panel_browser()
    home = home or tmp_path / "ktrain-home"
    token = secrets.token_hex(16)
    root, _config, env = lab_env(tmp_path, home, labextension=BUILT)
    env["JUPYTER_CONFIG_PATH"] = str(ROOT / "jupyter-config")
    with jupyter_app("lab", root, env, tmp_path / "lab.log", token) as url:
        yield Lab(url, token, root, home)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium is not installed at {CHROMIUM} (.ci/run installs it)")
    pytest.importorskip("playwright.sync_api")
    home, token = tmp_path / "ktrain-home", secrets.token_hex(16)
    root, _config, env = lab_env(tmp_path, home)
    with jupyter_app("lab", root, env, tmp_path / "lab.log", token) as url:
        yield Lab(url, token, root, home)


KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle';
}"""
KERNEL_STATE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const c = w && w.sessionContext;
  const k = c && c.session && c.session.kernel;
  return {widget: w ? w.title.label : null, kernel: k ? k.status : null,
          connection: k ? k.connectionStatus : null};
}"""
RECONNECT = (
    """() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.reconnect()"""
)


def wait_kernel_idle(page: Any, timeout_s: float = 90.0) -> None:
    """The notebook's kernel idle in the page. Twice in full runs on a busy machine the page
    never read the kernel idle although it had started and its websocket connected (the
    server's log: nothing after that for 90 s; the cause is not known). A user then picks
    "Reconnect to Kernel", and so does this, once, before it gives up with what the page
    said."""
    try:
        page.wait_for_function(KERNEL_IDLE, timeout=timeout_s * 500)
        return
    except Exception:
        state = page.evaluate(KERNEL_STATE)
    if state.get("kernel") is not None:
        page.evaluate(RECONNECT)
    try:
        page.wait_for_function(KERNEL_IDLE, timeout=timeout_s * 1000)
    except Exception as exc:
        raise AssertionError(
            f"the notebook's kernel was not idle in {1.5 * timeout_s:.0f} s: the page said "
            f"{state} before a reconnect, {page.evaluate(KERNEL_STATE)} after"
        ) from exc


LOSS_POINTS = """() => {
  let n = 0;
  for (const panel of document.querySelectorAll('.ktrain-WidgetChart .ktrain-WidgetPanel')) {
    const title = panel.querySelector('.ktrain-WidgetPanelTitle');
    if (!title || title.textContent !== 'loss') continue;  // not each rank's step time
    for (const line of panel.querySelectorAll('polyline')) {
      if ((line.dataset.label || '').startsWith('rank')) n += Number(line.dataset.points);
    }
  }
  return n;
}"""
RANK2_ONLY = """() => {
  const text = [...document.querySelectorAll('.widget-box pre')].map(p => p.innerText).join('\\n');
  const lines = text.split('\\n').filter(l => l.trim());
  return lines.length >= 30 && lines.every(l => l.startsWith('[rank2]'));
}"""
# every 100 ms: what the notebook's kernel indicator says, and the monitor's header state
SAMPLE_INDICATOR = """(header) => {
  window.__ktrainSamples = [];
  window.__ktrainTimer = setInterval(() => {
    const el = document.querySelector('.jp-Notebook-ExecutionIndicator');
    const h = header();
    const state = ['Running', 'Succeeded', 'Failed'].find(s => h.includes(' ' + s + ' ')) || '';
    window.__ktrainSamples.push([el ? el.dataset.status : '', state]);
  }, 100);
}"""
HEADER = """() => {
  const h = [...document.querySelectorAll('.widget-html-content')]
    .find(e => e.textContent.includes('●'));
  return h ? h.textContent : '';
}"""


# the header's lines at the page's width: its height over its line height, its text
HEADER_LINES = """() => {
  const h = [...document.querySelectorAll('.widget-html-content')]
    .find(e => e.textContent.includes('●'));
  if (!h) return null;
  const line = parseFloat(getComputedStyle(h).lineHeight);
  return {lines: h.getBoundingClientRect().height / line, text: h.textContent};
}"""


def _header_fits(page: Any) -> None:
    """At 1100 px and at 900 px, JupyterLab's file browser open beside the notebook, the header
    is two lines: the job, its state, clock and progress on one, its details on the next, each
    cut short where the row is narrow (a header that wrapped read three lines at 1100 px with a
    longer message, four here at 900 px); then the page as it was."""
    was = page.viewport_size
    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
    try:
        for width in (1100, 900):
            page.set_viewport_size({"width": width, "height": was["height"]})
            page.wait_for_timeout(500)  # a layout after the resize
            seen = page.evaluate(HEADER_LINES)
            assert seen is not None
            print(f"widget header at {width} px: {seen['lines']:.2f} lines")
            assert "Running" in seen["text"], seen
            assert seen["lines"] <= 2.2, (width, seen)
    finally:
        page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
        page.set_viewport_size(was)


def _assert_busy_while_running(samples: list[list[str]]) -> None:
    """The indicator read busy whenever the header said Running: an idle status that another
    thread's request ends with may blink, but never stays (two samples in a row)."""
    running = [status for status, state in samples if state == "Running"]
    assert len(running) >= 20, samples  # several seconds of the job, seen
    assert set(running) <= {"busy", "idle"}, running  # the indicator is there
    stuck = [i for i in range(1, len(running)) if running[i - 1] == running[i] == "idle"]
    assert not stuck, f"kernel read idle while the job ran: {running}"


def test_monitor_in_jupyterlab_shows_all_ranks_growing_plot_and_success(lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    name = f"widget-browser-{int(time.time())}"
    write_notebook(lab.root / "monitor.ipynb", name, steps=30, pause=0.3)
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1600})
            page.goto(f"{lab.url}/lab/tree/monitor.ipynb?reset&token={lab.token}")
            try:
                wait_kernel_idle(page)
            except Exception:
                screenshot(page, "widget-jupyterlab-failed.png")
                raise
            # not awaited: the command's promise resolves only once every cell has run
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            try:
                _watch_job(page, name)
            except Exception:
                screenshot(page, "widget-jupyterlab-failed.png")
                raise
            page.locator(".jp-OutputArea-output .widget-vbox").first.scroll_into_view_if_needed()
            screenshot(page, "widget-jupyterlab.png", full_page=True)
        finally:
            browser.close()
            LocalBackend(lab.home).cancel(name) if (lab.home / "jobs" / name).exists() else None


def _watch_job(page: Any, name: str) -> None:
    page.evaluate(f"() => ({SAMPLE_INDICATOR})({HEADER})")
    # running: the header says so, and rank lines arrive in the log pane
    page.wait_for_function(
        f"() => ({HEADER})().includes('{name}') && ({HEADER})().includes('Running')",
        timeout=40_000,
    )
    page.wait_for_function(f"() => ({LOSS_POINTS})() > 0", timeout=60_000)
    first = page.evaluate(LOSS_POINTS)
    page.wait_for_function(f"() => ({LOSS_POINTS})() > {first}", timeout=30_000)
    header = page.evaluate(HEADER)
    assert "Running" in header, header  # the plot grew while the job was still running
    screenshot(page, "widget-jupyterlab-running.png")
    _header_fits(page)
    page.wait_for_function(f"() => ({HEADER})().includes('Succeeded')", timeout=90_000)
    _assert_busy_while_running(page.evaluate("() => window.__ktrainSamples"))
    # the header can say Succeeded one tick before the view's final plot redraw (close())
    page.wait_for_function(f"() => ({LOSS_POINTS})() === {4 * 30}", timeout=10_000)
    logs = page.locator(".widget-box pre").all_inner_texts()
    text = "\n".join(logs)
    for rank in range(4):
        assert f"[rank{rank}] rank {rank} step 30 loss" in text, text[-2000:]
    page.wait_for_function("() => document.body.innerText.includes('RESULT r=0')", timeout=30_000)
