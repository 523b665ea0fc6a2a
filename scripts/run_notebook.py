#!/usr/bin/env python3
"""Execute an example notebook headless on the local backend and keep everything it made.

    python scripts/run_notebook.py notebooks/01-quickstart.ipynb --out runs/quickstart

Writes OUT/<notebook>.ipynb (executed, with outputs and widget state), OUT/jobs/<job>/ (each
job's code, plan, state and every node's and rank's log) and OUT/plots/<job>.html (the
metrics each job reported with ``ktrain.report``, rebuilt from its logs). Exit status: 0 when
every cell ran and every job the notebook started succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's jupyter_ktrain, also for the kernel below


def save_plots(jobs: Path, plots: Path) -> list[Path]:
    """One HTML file per job that reported metrics (plotly.js written once, beside them)."""
    from jupyter_ktrain.backends.local import FileLogSource
    from jupyter_ktrain.monitor.live import model_from_logs
    from jupyter_ktrain.widgets.plots import metrics_figure

    written = []
    for job in sorted(p for p in jobs.iterdir() if p.is_dir()):
        lines = []
        for log in sorted(job.glob("node-*.log")):
            source = FileLogSource(log, log.stem)
            lines.extend((log.stem, raw) for raw in source.finish())
        fig = metrics_figure(model_from_logs(job.name, lines))
        if fig is None:
            continue
        plots.mkdir(parents=True, exist_ok=True)
        target = plots / f"{job.name}.html"
        fig.write_html(target, include_plotlyjs="directory")
        written.append(target)
    return written


def job_states(jobs: Path) -> dict[str, str]:
    states = {}
    for job in sorted(p for p in jobs.iterdir() if p.is_dir()):
        try:
            raw = json.loads((job / "state.json").read_text())
        except (OSError, ValueError):
            raw = {}
        reason = f" ({raw['reason']})" if raw.get("reason") else ""
        states[job.name] = str(raw.get("state", "Unknown")) + reason
    return states


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[1])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    args = parser.parse_args()

    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    home = out / "ktrain-home"
    home.mkdir(parents=True)
    os.environ["KTRAIN_HOME"] = str(home)  # the kernel inherits it: jobs land under OUT
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )

    nb = nbformat.read(args.notebook, as_version=4)
    started = time.monotonic()
    print(f"executing {args.notebook} (jobs under {home}) ...", flush=True)
    client = NotebookClient(
        nb,
        timeout=args.timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(args.notebook.parent)}},
    )
    ok = True
    try:
        client.execute()
    except CellExecutionError as exc:
        ok = False
        print(f"a cell failed:\n{exc}", file=sys.stderr)
    finally:
        target = out / args.notebook.name
        nbformat.write(nb, target)
        print(f"executed notebook: {target}")
    jobs = out / "jobs"
    if (home / "jobs").is_dir():
        shutil.copytree(home / "jobs", jobs)
    states = job_states(jobs) if jobs.is_dir() else {}
    for name, state in states.items():
        logs = ", ".join(sorted(p.name for p in (jobs / name).glob("*.log")))
        print(f"job {name}: {state}; logs: {logs}")
        if not state.startswith("Succeeded"):
            ok = False
            print(f"job {name} did not succeed: {state}", file=sys.stderr)
    for plot in save_plots(jobs, out / "plots") if jobs.is_dir() else []:
        print(f"plot: {plot}")
    print(f"done in {time.monotonic() - started:.1f} s; everything is under {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
