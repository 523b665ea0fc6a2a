"""jupyter-ktrain installed as users install it: built the standard way from a clean copy of
the repository (``python -m build``), then installed into fresh virtual environments (by ``uv
pip install``, and by pip for the bare install), and used from there alone (see
``tests/install_env.py``).

- The wheel and the sdist both carry the side panel and its ``install.json``; a build without
  npm fails and says what to install.
- The wheel with the newest JupyterLab 4.x the index serves, and the sdist with the oldest one
  we support: ``jupyter labextension list`` and ``jupyter server extension list`` show both
  halves enabled (the panel from the Python package ``jupyter-ktrain``); ``ktrain.run`` from a
  plain script runs a 1x2 local job; a ``%%ktrain`` cell runs in JupyterLab (in Chromium),
  whose "ktrain jobs" panel lists both jobs and opens the script job's tab with its lines.
  With the panel disabled, the widget's "Open in side panel" says how to get it.
- Without torch, without the ``kubernetes`` extra, without ipywidgets: one line each, naming
  the ``pip install`` that fixes it, and no job made.
Logs of every build and install: test-artifacts/install-*.log.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.install_env import (
    Dists,
    Venv,
    build_dists,
    clean_copy,
    make_venv,
    provide_torch,
    run,
    sdist_names,
    wheel_names,
)
from tests.jupyter_process import jupyter_app

from ..browser.test_widget_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    LAB_CONFIG,
    require_panel_browser,
    screenshot,
    wait_kernel_idle,
)
from ..panel_jobs import TRAIN
from .widget_notebook import save_notebook

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
NEWEST = "jupyterlab>=4,<5"  # the newest 4.x the index serves
OLDEST = "jupyterlab==4.2.*"  # the oldest JupyterLab the README says we support
PANEL = "share/jupyter/labextensions/jupyter-ktrain"
SCRIPT_JOB, CELL_JOB, NOPANEL_JOB = "inst-script", "inst-cell", "inst-nopanel"

SCRIPT = (
    TRAIN
    + f"""

if __name__ == "__main__":
    job = ktrain.run(train, args=(5, 0.0), nodes=1, procs_per_node=2, name={SCRIPT_JOB!r})
    print("RESULT", job.result)
"""
)


def _log(name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS / f"install-{name}.log"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    if subprocess.run(["which", "npm"], capture_output=True).returncode != 0:
        pytest.skip("npm is not installed: the side panel cannot be built (make system)")
    tmp = tmp_path_factory.mktemp("dist")
    src = clean_copy(tmp / "src")
    assert not (src / "jupyter_ktrain" / "labextension").exists()  # a clone has no built panel
    return build_dists(src, tmp / "dist", _log("build"))


def test_the_wheel_and_the_sdist_carry_the_side_panel_and_its_install_json(dists: Dists) -> None:
    names = wheel_names(dists.wheel)
    data = f"jupyter_ktrain-{_version(dists)}.data/data"
    assert f"{data}/{PANEL}/package.json" in names
    assert f"{data}/{PANEL}/install.json" in names
    assert any(re.fullmatch(rf"{data}/{PANEL}/static/remoteEntry\.\w+\.js", n) for n in names)
    assert f"{data}/etc/jupyter/jupyter_server_config.d/jupyter_ktrain.json" in names
    top = f"jupyter_ktrain-{_version(dists)}"
    in_sdist = sdist_names(dists.sdist)
    assert f"{top}/jupyter_ktrain/labextension/package.json" in in_sdist
    assert f"{top}/jupyter_ktrain/labextension/static/style.js" in in_sdist
    assert f"{top}/labextension/install.json" in in_sdist
    assert not any("node_modules" in n for n in in_sdist)


def test_a_build_without_npm_fails_and_says_what_to_install(tmp_path: Path) -> None:
    src = clean_copy(tmp_path / "src")
    path = str(Path(sys.executable).parent)  # python, and no npm
    done = run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
                str(tmp_path / "dist"), str(src)], _log("no-npm"), env={"PATH": path})  # fmt: skip
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "npm is not on PATH: install Node.js and npm" in out, out[-3000:]
    assert not list((tmp_path / "dist").glob("*.whl")) if (tmp_path / "dist").exists() else True


def _version(dists: Dists) -> str:
    return dists.wheel.name.split("-")[1]


@pytest.fixture(params=["wheel", "sdist"])
def installed(
    request: pytest.FixtureRequest, dists: Dists, tmp_path: Path
) -> Iterator[tuple[str, Venv]]:
    """The wheel with the newest JupyterLab, or the sdist (the installer builds its wheel) with the
    oldest supported one; both with the notebook and kubernetes extras, torch provided."""
    which = request.param
    artefact, lab = (dists.wheel, NEWEST) if which == "wheel" else (dists.sdist, OLDEST)
    # numpy: torch warns at import without it, and every environment with torch has it
    wanted = [f"jupyter-ktrain[notebook,kubernetes] @ {artefact.as_uri()}", lab, "numpy"]
    venv = make_venv(tmp_path / "venv", wanted, _log(f"pip-{which}"), torch=True,
                     home=tmp_path / "ktrain-home")  # fmt: skip
    return which, venv


def test_installed_from_the_package_it_runs_jobs_and_shows_them_in_the_panel(
    installed: tuple[str, Venv], tmp_path: Path
) -> None:
    which, venv = installed
    # no trace of the checkout: the package is the installed one
    where = _out(venv, [venv.python, "-c", "import jupyter_ktrain; print(jupyter_ktrain.__file__)"])
    assert str(venv.path) in where, where
    labexts = _out(venv, [venv.bin("jupyter"), "labextension", "list"])
    assert re.search(r"jupyter-ktrain v\S+ enabled\s+OK \(python, jupyter-ktrain\)", labexts), (
        labexts
    )
    servers = _out(venv, [venv.bin("jupyter"), "server", "extension", "list"])
    assert re.search(r"jupyter_ktrain enabled", servers), servers
    assert re.search(r"jupyter_ktrain \S+ OK", servers), servers
    # a plain script: ktrain.run follows a 1 x 2 local job to its end
    (tmp_path / "train.py").write_text(SCRIPT)
    script = _out(venv, [venv.python, "train.py"], cwd=tmp_path, timeout=180)
    assert "RESULT 0" in script, script
    assert "[rank1]: rank 1 step 5 hello" in script, script
    # a cell in JupyterLab, and the panel listing both jobs
    _in_the_browser(venv, tmp_path, which)


def _out(venv: Venv, cmd: list[str], cwd: Path | None = None, timeout: float = 120) -> str:
    """``cmd``'s output, run as a user's shell in ``venv`` runs it (from a folder of its own:
    never the checkout, whose package ``python -c`` would find first)."""
    done = subprocess.run(cmd, env=venv.env, cwd=cwd or venv.path.parent, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    out = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # Jupyter's colours
    assert done.returncode == 0, f"{' '.join(cmd)} failed ({done.returncode}):\n{out[-4000:]}"
    return out


ROWS = """() => [...document.querySelectorAll('#ktrain-jobs-panel .ktrain-JobRow')]
  .map(r => r.dataset.name + ':' + r.dataset.state)"""


def _lab_root(venv: Venv, tmp_path: Path, job: str) -> Path:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    config = Path(venv.env["JUPYTER_CONFIG_DIR"])
    config.mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.py").write_text(LAB_CONFIG)
    settings = Path(venv.env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    save_notebook(
        root / f"{job}.ipynb",
        "%load_ext jupyter_ktrain",
        TRAIN,
        f"%%ktrain --nodes 1 --procs-per-node 2 --name {job}\nr = train(5, 0.2)",
        'print(f"RESULT r={r}")',
    )
    return root


@contextlib.contextmanager
def _lab_page(venv: Venv, tmp_path: Path, job: str, shot: str) -> Iterator[Any]:
    """JupyterLab of ``venv`` with a notebook whose cell runs job ``job``, open in Chromium
    with its kernel idle; a screenshot ``install-SHOT-failed.png`` when the test fails."""
    from playwright.sync_api import sync_playwright

    require_panel_browser()
    root = _lab_root(venv, tmp_path, job)
    token = secrets.token_hex(16)
    log = tmp_path / f"lab-{shot}.log"
    with (
        jupyter_app("lab", root, venv.env, log, token, python=venv.python, cwd=root) as url,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        try:
            page.goto(f"{url}/lab/tree/{job}.ipynb?reset&token={token}")
            wait_kernel_idle(page)
            yield page
            screenshot(page, f"install-{shot}.png")
        except Exception:
            screenshot(page, f"install-{shot}-failed.png")
            raise
        finally:
            browser.close()


RUN_ALL = "() => window.jupyterapp.commands.execute('notebook:run-all-cells')"
SCRIPT_JOB_LOGS = f"""() => {{
  const t = document.querySelector('#ktrain-job-{SCRIPT_JOB} .ktrain-Logs');
  return !!t && t.innerText.includes('[rank1] rank 1 step 5 hello'); }}"""


def _in_the_browser(venv: Venv, tmp_path: Path, which: str) -> None:
    with _lab_page(venv, tmp_path, CELL_JOB, which) as page:
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.evaluate(RUN_ALL)
        page.wait_for_function(
            "() => document.body.innerText.includes('RESULT r=0')", timeout=120_000
        )
        page.locator(f".ktrain-open-panel.ktrain-job-{CELL_JOB}").click()
        page.wait_for_function(
            f"""() => {{ const rows = ({ROWS})();
               return rows.includes('{CELL_JOB}:Succeeded')
                   && rows.includes('{SCRIPT_JOB}:Succeeded'); }}""",
            timeout=30_000,
        )
        page.locator(f"#ktrain-jobs-panel .ktrain-JobRow[data-name='{SCRIPT_JOB}']").click()
        page.wait_for_function(SCRIPT_JOB_LOGS, timeout=30_000)
        assert not [e for e in errors if "ktrain" in e.lower()], errors
    if which == "wheel":
        _without_the_panel(venv, tmp_path)


def _without_the_panel(venv: Venv, tmp_path: Path) -> None:
    """The same lab with the extension disabled as a user disables it: the widget's button
    says the panel is not loaded and how to get it."""
    _out(venv, [venv.bin("jupyter"), "labextension", "disable", "jupyter-ktrain"])
    with _lab_page(venv, tmp_path, NOPANEL_JOB, "nopanel") as page:
        page.evaluate(RUN_ALL)
        button = page.locator(f".ktrain-open-panel.ktrain-job-{NOPANEL_JOB}")
        button.wait_for(state="visible", timeout=60_000)
        hint = page.locator(".ktrain-panel-hint")
        assert hint.inner_text().strip() == ""  # nothing said before a click
        button.click()
        page.wait_for_function(
            "() => document.querySelector('.ktrain-panel-hint').innerText"
            ".includes('side panel is not loaded')",
            timeout=10_000,
        )
        text = hint.inner_text()
        assert "pip install jupyter-ktrain" in text, text
        assert "restart JupyterLab" in text, text
        assert page.locator("#ktrain-jobs-panel").count() == 0


# -- what a partial install says ---------------------------------------------------------
KERNEL_DRIVER = """
import sys
from jupyter_client.manager import start_new_kernel

km, kc = start_new_kernel(kernel_name="python3")
out = []
try:
    for code in sys.argv[1:]:
        msg_id = kc.execute(code)
        while True:
            msg = kc.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                out.append("ERROR " + content["ename"] + ": " + content["evalue"])
            elif kind == "display_data":
                out.append("DISPLAY " + str(sorted(content["data"])))
            elif kind == "status" and content["execution_state"] == "idle":
                break
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
print("".join(out))
"""

NO_WIDGET_CELL = """%%ktrain --nodes 1 --procs-per-node 2 --name inst-nowidget
print("rank", __import__("os").environ["RANK"], "of", __import__("os").environ["WORLD_SIZE"])
"""


def test_a_partial_install_says_the_missing_piece_and_its_fix_in_one_line(
    dists: Dists, tmp_path: Path
) -> None:
    home = tmp_path / "ktrain-home"
    # the base package and a kernel: no extras, no torch, no ipywidgets
    venv = make_venv(tmp_path / "venv", [str(dists.wheel), "ipykernel"], _log("pip-bare"),
                     torch=False, home=home, installer="pip")  # fmt: skip
    (tmp_path / "train.py").write_text(SCRIPT)
    # no torch: the local backend refuses the job before making it
    done = subprocess.run([venv.python, "train.py"], env=venv.env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("jupyter_ktrain.errors.MissingPackage: "), done.stderr[-2000:]
    assert "torchrun, which comes with PyTorch" in last, last
    assert "`pip install torch`" in last, last
    assert not (home / "jobs").exists() or not any((home / "jobs").iterdir())
    # no kubernetes extra: `ktrain render` and a cluster's dry run say the extra, in one line
    args = ["render", "--name", "r", "--image", "pytorch/pytorch:2.5", "--nodes", "2"]
    render = subprocess.run([venv.bin("ktrain"), *args], env=venv.env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert render.returncode == 2, render.stdout + render.stderr
    lines = render.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "pip install 'jupyter-ktrain[kubernetes]'" in lines[0], lines
    assert "kubernetes_validate" in lines[0]
    assert "Traceback" not in render.stderr
    # no ipywidgets (torch now provided): the cell says so once and shows the job as text
    provide_torch(venv)
    again = NO_WIDGET_CELL.replace("--name", "--replace --name")  # said once per kernel
    cells = ["%load_ext jupyter_ktrain", NO_WIDGET_CELL, again,
             "%%ktrain --backend kubernetes --dry-run\n1"]  # fmt: skip
    kernel = _out(venv, [venv.python, "-c", KERNEL_DRIVER, *cells], cwd=tmp_path, timeout=240)
    said = [ln for ln in kernel.splitlines() if "live widget needs" in ln]
    assert len(said) == 1, kernel
    assert "pip install 'jupyter-ktrain[notebook]'" in said[0]
    assert "shown as text" in said[0]
    assert "rank 1 of 2" in kernel, kernel
    assert "DISPLAY" not in kernel  # no widget was attempted
    cluster = [ln for ln in kernel.splitlines() if ln.startswith("UsageError: ktrain: A cluster")]
    assert len(cluster) == 1, kernel
    assert "jupyter-ktrain[kubernetes]" in cluster[0], kernel
    assert kernel.count("inst-nowidget: Succeeded") == 2, kernel
