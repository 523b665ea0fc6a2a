"""The notebook the widget tests run, in a real kernel (nbclient) and in JupyterLab: a 2 x 2
local job whose every rank prints and reports a loss for a few seconds."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

TRAIN = """import os
import time

import jupyter_ktrain as ktrain


def train(steps, pause):
    rank = int(os.environ["RANK"])
    for step in range(1, steps + 1):
        loss = 2.0 / step + 0.1 * rank
        ktrain.report(step=step, loss=loss)
        print(f"rank {rank} step {step} loss {loss:.3f}", flush=True)
        time.sleep(pause)
    return rank
"""

REPORT = """import json
from jupyter_ktrain.frontends.notebook import last_monitor

model, view = last_monitor()
print("MONITOR " + json.dumps({
    "view": type(view).__name__,
    "loss_points": [drawn.get("loss", 0) for _t, drawn in view.plot_history],
    "state": model.header.state,
    "labels": model.labels(),
}))
"""


def save_notebook(path: Path, *sources: str) -> Path:
    """A notebook of one code cell per source, on the python3 kernel, written to ``path``."""
    nb = new_notebook(cells=[new_code_cell(source) for source in sources])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def write_notebook(path: Path, name: str, steps: int = 16, pause: float = 0.25) -> Path:
    return save_notebook(
        path,
        "%load_ext jupyter_ktrain",
        TRAIN,
        f"%%ktrain --nodes 2 --procs-per-node 2 --name {name}\nr = train({steps}, {pause})",
        'print(f"RESULT r={r}")',
        REPORT,
    )
