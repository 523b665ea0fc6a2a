"""A hang named in a real JupyterLab + Chromium: a notebook runs a 2-node local job with
``--hang-after 3s`` whose rank 1 sleeps before an all-reduce at step 5 (rank 0 waits inside it).
The cell's widget names rank 1 and where it waits; its "Open in side panel" button opens the
job's tab, which shows the same warning and, folded under it, the stacks taken then (rank 0
inside ``all_reduce``); its Stacks button takes every rank's stack again, and is disabled once
the job was cancelled. Screenshot: test-artifacts/hang-panel.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from tests.notebook_cells import HANG_CELL, HANG_SLEEP_LINE

from ..integration.widget_notebook import save_notebook
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

JOB = "hang-browser"
WAITS = f"rank 1 waits in sleep <- steps_then_hang (cell [2], line {HANG_SLEEP_LINE})"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with panel_lab(tmp_path) as lab:
        yield lab


def _notebook(path: Path) -> None:
    save_notebook(
        path,
        "%load_ext jupyter_ktrain",
        HANG_CELL,
        f"%%ktrain --nodes 2 --procs-per-node 1 --hang-after 3s --name {JOB}\n"
        "steps_then_hang(5, 1)",
    )


def test_the_widget_and_the_panel_name_the_hung_rank_with_its_stacks(lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    _notebook(lab.root / "hang.ipynb")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(f"{lab.url}/lab/tree/hang.ipynb?reset&token={lab.token}")
            wait_kernel_idle(page)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            # the widget: the warning, then where rank 1 waits (its stack, taken once)
            page.wait_for_function(
                f"() => document.body.innerText.includes({WAITS!r})", timeout=90_000
            )
            text = page.locator(".jp-OutputArea-output", has_text=WAITS).first.inner_text()
            assert "⚠ rank 1 (node 1) has made no progress for " in text, text
            assert "the others inside a collective, it is not" in text, text
            # the job's tab in the side panel says the same, with the stacks under it
            page.locator(f".ktrain-open-panel.ktrain-job-{JOB}").click()
            warning = page.locator(f"#ktrain-job-{JOB} .ktrain-Warning", has_text=WAITS)
            warning.wait_for(timeout=30_000)
            said = warning.inner_text()
            assert said.startswith("⚠ rank 1 (node 1) has made no progress for "), said
            stacks = page.locator(f"#ktrain-job-{JOB} .ktrain-HangStacks")
            stacks.locator("summary").click()
            whole = stacks.locator("pre").inner_text()
            assert whole.startswith(f"Stacks of {JOB!r}, 2 ranks"), whole
            rank0 = whole.split("\nrank 1, pid ")[0]
            assert "in all_reduce" in rank0, whole
            screenshot(page, "hang-panel.png")
            # the tab's Stacks button: every rank's stack now, rank 1 still in the cell's sleep
            tab = page.locator(f"#ktrain-job-{JOB}")
            tab.locator(".ktrain-StacksButton").click()
            taken = tab.locator(".ktrain-TakenStacks pre")
            taken.wait_for(timeout=30_000)
            now = taken.inner_text()
            assert now.startswith(f"Stacks of {JOB!r}, 2 ranks"), now
            rank1 = now.split("\nrank 1, pid ")[1]
            assert f'File "cell [2]", line {HANG_SLEEP_LINE}, in steps_then_hang' in rank1, now
            assert (
                tab.locator(".ktrain-TakenStacks summary")
                .inner_text()
                .startswith("stacks taken at ")
            )
            # once the job ended there are none to take: the button says so by being disabled
            tab.locator(".ktrain-Cancel").click()
            page.wait_for_function(
                f"() => document.querySelector('#ktrain-job-{JOB} .ktrain-StacksButton').disabled",
                timeout=30_000,
            )
        except Exception:
            screenshot(page, "hang-failed.png")
            raise
        finally:
            browser.close()
            if (lab.home / "jobs" / JOB).exists():
                LocalBackend(lab.home).cancel(JOB)
