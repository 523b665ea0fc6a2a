"""A profile in a real JupyterLab + Chromium: a notebook starts a 1x2 gloo job that trains and
reports each step, then runs ``%ktrain profile NAME --steps 2`` in a cell (the table in its
output); the side panel's tab of the job shows the same table, folded, and each rank's Chrome
trace downloads from it as valid JSON. Screenshot: test-artifacts/profile-panel.png."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from tests.notebook_cells import PROFILE_CELL

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

JOB = "prof-browser"
HEAD = f"Profile of {JOB!r}: 2 ranks, 2 steps each (CPU time):"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    with panel_lab(tmp_path) as lab:
        yield lab


def _notebook(path: Path) -> None:
    save_notebook(
        path,
        "%load_ext jupyter_ktrain",
        PROFILE_CELL,
        f"%%ktrain --nodes 1 --procs-per-node 2 --name {JOB} --detach\ntrain_steps(100_000, 0.05)",
        "import time\n"
        "from jupyter_ktrain.backends.local import LocalBackend\n"
        f"while not all(f'rank {{r}} up' in LocalBackend().attach({JOB!r}).logs() "
        "for r in range(2)):\n"
        "    time.sleep(0.2)",
        f"%ktrain profile {JOB} --steps 2",
    )


def test_the_cell_and_the_panel_show_the_profile_and_the_traces_download(lab: Lab) -> None:
    from playwright.sync_api import sync_playwright

    _notebook(lab.root / "profile.ipynb")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1000}, accept_downloads=True)
        try:
            page.goto(f"{lab.url}/lab/tree/profile.ipynb?reset&token={lab.token}")
            wait_kernel_idle(page)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
            page.wait_for_function(
                f"() => document.body.innerText.includes({HEAD!r})", timeout=150_000
            )
            out = page.locator(".jp-OutputArea-output", has_text=HEAD).first.inner_text()
            assert "\nrank 1: top CPU operators, self time\n" in out, out
            # the panel: the job's tab, the table folded, a download per rank
            page.evaluate("() => window.jupyterapp.commands.execute('ktrain:open-panel')")
            page.locator("#ktrain-jobs-panel .ktrain-Refresh").click()
            page.locator(f"#ktrain-jobs-panel .ktrain-JobRow[data-name='{JOB}']").click()
            profile = page.locator(f"#ktrain-job-{JOB} .ktrain-Profile")
            profile.wait_for(timeout=30_000)
            profile.locator("summary").click()
            table = profile.locator("pre").inner_text()
            assert table.startswith(HEAD), table
            assert "gloo:all_reduce" in table, table
            links = profile.locator(".ktrain-TraceLink")
            assert links.all_inner_texts() == ["Chrome trace, rank 0", "Chrome trace, rank 1"]
            screenshot(page, "profile-panel.png")
            with page.expect_download() as got:
                links.nth(1).click()
            download = got.value
            assert download.suggested_filename == f"{JOB}-rank1.trace.json.gz"
            trace = json.loads(gzip.decompress(Path(download.path()).read_bytes()))
            assert "aten::addmm" in {e.get("name") for e in trace["traceEvents"]}
        except Exception:
            screenshot(page, "profile-failed.png")
            raise
        finally:
            browser.close()
            if (lab.home / "jobs" / JOB).exists():
                LocalBackend(lab.home).cancel(JOB)
