#!/usr/bin/env python3
"""Execute an example notebook headless on the local backend and keep everything it made.

    python scripts/run_notebook.py notebooks/01-quickstart.ipynb --out runs/quickstart

Writes OUT/<notebook>.ipynb (executed, with outputs), OUT/jobs/<job>/ (each job's code, plan,
state and every node's and rank's log) and OUT/plots/ (plots the notebook's jobs reported).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
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

    nb = nbformat.read(args.notebook, as_version=4)
    started = time.monotonic()
    print(f"executing {args.notebook} (jobs under {home}) ...", flush=True)
    client = NotebookClient(
        nb,
        timeout=args.timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(args.notebook.parent)}},
    )
    try:
        client.execute()
    finally:
        target = out / args.notebook.name
        nbformat.write(nb, target)
        jobs = home / "jobs"
        if jobs.is_dir():
            shutil.copytree(jobs, out / "jobs")
        print(f"executed notebook: {target}")
        for job in sorted((out / "jobs").glob("*")) if (out / "jobs").is_dir() else []:
            logs = sorted(p.name for p in job.glob("*.log"))
            print(f"job {job.name}: {', '.join(logs)}")
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                sys.stdout.write(output.get("text", ""))
    print(f"done in {time.monotonic() - started:.1f} s; everything is under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
