"""Compare in the side panel, in a real JupyterLab + Chromium (Playwright): two finished local
jobs that differ in one flag (``--nodes``) are ticked in the job list, Compare opens a tab with
both jobs' loss curves on one chart and the differing flag listed beside it, with a picker of
the metrics they reported. Screenshot: test-artifacts/compare.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..panel_jobs import run_job
from .test_panel_browser import PANEL_VISIBLE, ROWS
from .test_widget_browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Lab,
    panel_lab,
    screenshot,
)

pytestmark = pytest.mark.slow

TWO, ONE = "cmp-two-nodes", "cmp-one-node"
CURVES = """() => [...document.querySelectorAll('.ktrain-CompareView polyline')]
  .map(l => l.dataset.label + ':' + l.dataset.points)"""


@pytest.fixture
def compare_lab(tmp_path: Path) -> Iterator[Lab]:
    home = tmp_path / "ktrain-home"
    run_job(home, TWO, nodes=2, steps=5)
    run_job(home, ONE, nodes=1, steps=8)
    with panel_lab(tmp_path, home) as lab:
        yield lab


def test_two_finished_jobs_compared_in_the_panel(compare_lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    lab = compare_lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        try:
            page.goto(f"{lab.url}/lab?reset&token={lab.token}")
            page.wait_for_function(
                "() => window.jupyterapp && window.jupyterapp.commands.hasCommand("
                "'ktrain:open-panel')",
                timeout=90_000,
            )
            # after the lab restored its layout (a restore would fold the sidebar again)
            page.evaluate("async () => { await window.jupyterapp.restored; }")
            page.evaluate("() => window.jupyterapp.commands.execute('ktrain:open-panel')")
            page.wait_for_function(PANEL_VISIBLE, timeout=10_000)
            page.wait_for_function(f"() => ({ROWS})().length === 2", timeout=15_000)
            compare = page.locator("#ktrain-jobs-panel .ktrain-Compare")
            assert compare.is_disabled()  # nothing ticked yet
            for name in (TWO, ONE):
                row = page.locator(f"#ktrain-jobs-panel .ktrain-JobRow[data-name='{name}']")
                row.locator(".ktrain-Select").check()
            assert compare.inner_text() == "Compare (2)"
            assert page.locator(".ktrain-JobView").count() == 0  # a tick opens no job tab
            compare.click()
            page.wait_for_function(f"() => ({CURVES})().length === 2", timeout=20_000)
            curves = dict(c.split(":") for c in page.evaluate(CURVES))
            # rank 0's loss of each job, every step it reported (5 and 8: under the panel's
            # points, so none dropped)
            assert curves == {TWO: "5", ONE: "8"}, curves
            view = page.locator(".ktrain-CompareView")
            title = view.locator(".ktrain-ChartTitle").text_content()  # an SVG text
            assert title == f"loss across {TWO}, {ONE}", title
            assert view.locator(".ktrain-YTitle").text_content() == "loss"  # the y axis's
            header = view.locator(".ktrain-CompareParams tr").first.inner_text().split()
            assert header == [TWO, ONE], header
            nodes = view.locator(".ktrain-CompareParam[data-param='nodes'] td")
            assert nodes.all_inner_texts() == ["nodes", "2", "1"]
            params = [
                e.get_attribute("data-param") for e in view.locator(".ktrain-CompareParam").all()
            ]
            assert set(params) - {"name"} == {"nodes"}, params  # --name and --nodes differed
            last = view.locator(".ktrain-CompareParams tr").nth(1).locator("td")
            assert last.all_inner_texts() == ["loss (last)", "0.2", "0.125"]  # 1/5 and 1/8
            screenshot(page, "compare.png")
            # the metric picker lists what the jobs reported, the compared one chosen
            assert view.locator(".ktrain-CompareMetric").input_value() == "loss"
            options = view.locator(".ktrain-CompareMetric option").all_inner_texts()
            assert "loss" in options, options
        except Exception:
            screenshot(page, "compare-failed.png")
            raise
        finally:
            browser.close()
