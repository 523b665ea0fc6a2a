"""The example notebooks, executed headless on the local backend exactly as ``make run`` does
(scripts/run_notebook.py): every cell runs, every job succeeds, plots are written."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"


def run_notebook(notebook: Path, out: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KTRAIN_HOME", "KTRAIN_MONITOR")}
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "run_notebook.py"),
            str(notebook),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def outputs_text(executed: Path) -> str:
    nb = nbformat.read(executed, as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def job_dirs(out: Path) -> list[Path]:
    return sorted(p for p in (out / "jobs").iterdir() if p.is_dir())


def test_quickstart_runs_its_job_and_plots_the_reported_loss(tmp_path: Path) -> None:
    out = tmp_path / "quickstart"
    done = run_notebook(NOTEBOOKS / "01-quickstart.ipynb", out)
    assert done.returncode == 0, done.stdout + done.stderr
    text = outputs_text(out / "01-quickstart.ipynb")
    assert "Succeeded {0: 0, 1: 0, 2: 0, 3: 0}" in text
    assert re.search(r"final loss from the job: \d+\.\d{4}", text)
    (job,) = [j for j in job_dirs(out) if (j / "state.json").exists()]  # the dry run starts none
    assert json.loads((job / "state.json").read_text())["state"] == "Succeeded"
    plot = (out / "plots" / f"{job.name}.html").read_text()
    assert '"name":"loss: rank 3"' in plot  # every rank's reported loss, from the job's logs
    assert (out / "plots" / "plotly.min.js").exists()


def test_deepspeed_zero3_notebook_trains_on_four_cpu_ranks(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    out = tmp_path / "deepspeed"
    done = run_notebook(NOTEBOOKS / "02-deepspeed-zero3.ipynb", out)
    assert done.returncode == 0, done.stdout + done.stderr
    text = outputs_text(out / "02-deepspeed-zero3.ipynb")
    first, last = map(float, re.findall(r"loss: first ([\d.]+), last ([\d.]+)", text)[0])
    assert last < 0.5 * first
    (job,) = job_dirs(out)
    shards = {}
    for rank in range(4):
        log = (job / f"rank-{rank}.log").read_text()
        held, total = map(int, re.findall(r"holds (\d+) of (\d+) parameters", log)[0])
        shards[rank] = held / total
    # ZeRO-3: each of the 4 ranks keeps about a quarter of the parameters
    assert all(0.2 < share < 0.3 for share in shards.values()), shards
    assert "loss: rank 0" in (out / "plots" / f"{job.name}.html").read_text()


def test_rdma_and_gang_notebook_renders_the_llm_job_without_a_cluster(tmp_path: Path) -> None:
    out = tmp_path / "rdma"
    done = run_notebook(NOTEBOOKS / "03-rdma-and-gang.ipynb", out)
    assert done.returncode == 0, done.stdout + done.stderr
    text = outputs_text(out / "03-rdma-and-gang.ipynb")
    assert "PyTorchJob llm-finetune: 4 nodes x 8 GPUs = 32 ranks, schema-valid" in text
    assert "NCCL_IB_GID_INDEX        3" in text
    assert "gang:            {'minAvailable': 4, 'queue': 'training'}" in text
    assert not (out / "jobs").exists()  # a dry run starts nothing


def test_fault_tolerance_notebook_resumes_after_a_killed_node(tmp_path: Path) -> None:
    out = tmp_path / "fault"
    done = run_notebook(NOTEBOOKS / "04-fault-tolerance.ipynb", out)
    assert done.returncode == 0, done.stdout + done.stderr
    text = outputs_text(out / "04-fault-tolerance.ipynb")
    assert "Succeeded after 1 restart(s)" in text, text
    first = int(re.search(r"the finished run began at step (\d+)", text)[1])  # type: ignore[index]
    assert first == 10  # the checkpoint of step 9, the last before the kill: node 1 died whole
    shown = (out / "04-fault-tolerance.ipynb").read_text()  # the widget's state
    assert f"resumed from step {first - 1} (checkpoint step-{first - 1}.pt)" in shown
    assert "fault-demo-node-1 restarted after exit 137" in shown


def test_sweep_notebook_runs_eight_trials_on_two_warm_jobs_and_compares_them(
    tmp_path: Path,
) -> None:
    """The grid of 4 learning rates x 2 batch sizes, two at a time on two warm jobs: which
    trials are pruned depends on the order the grid is asked in, but the best is always
    lr=0.1, batch=32 (at most one trial is better at any step, so it is never pruned)."""
    out = tmp_path / "sweep"
    done = run_notebook(NOTEBOOKS / "06-sweep.ipynb", out)
    assert done.returncode == 0, done.stdout + done.stderr
    text = outputs_text(out / "06-sweep.ipynb")
    assert "Sweep 'lr-sweep': 8 trial(s), 2 at a time on 2 warm job(s) lr-sweep-w0..w1" in text
    table = re.findall(r"^(\d)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+(\w+)\s+(lr-sweep-w[01]) run \d+$",
                       text, re.M)  # fmt: skip
    assert len(table) == 8, text
    assert {(lr, batch) for _n, lr, batch, *_ in table} == {
        (lr, batch) for lr in ("0.01", "0.03", "0.1", "0.3") for batch in ("4", "32")
    }
    assert {state for *_, state, _job in table} <= {"Succeeded", "Pruned"}, text
    best = re.findall(r"best trial \d: \{'lr': 0\.1, 'batch': 32\}, loss ([\d.]+)", text)
    assert best, text
    assert float(best[0]) == pytest.approx(0.2683, abs=0.01)
    assert f"final (set from the best trial): {best[0]}" in text
    assert "Ended the sweep's warm job(s) lr-sweep-w0, lr-sweep-w1." in text
    compared = {line[:24].strip(): line[24:].split() for line in text.splitlines()}
    assert len(compared["loss (last)"]) == 8, text  # %ktrain compare lr-sweep: every trial
    assert sorted(compared["lr"]) == sorted(lr for _n, lr, *_ in table)
    assert [j.name for j in job_dirs(out)] == ["lr-sweep-w0", "lr-sweep-w1"]


def test_run_notebook_fails_when_a_job_fails(tmp_path: Path) -> None:
    nb = new_notebook(
        cells=[
            new_code_cell("%load_ext jupyter_ktrain"),
            new_code_cell("def boom():\n    raise SystemExit(3)"),
            new_code_cell("%%ktrain --name doomed\nboom()"),
        ]
    )
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    path = tmp_path / "doomed.ipynb"
    nbformat.write(nb, path)
    done = run_notebook(path, tmp_path / "out")
    assert done.returncode == 1
    assert "job doomed did not succeed: Failed" in done.stderr
    assert (tmp_path / "out" / "doomed.ipynb").exists()


def test_hf_finetune_notebook_reports_trainer_logs_and_progress(tmp_path: Path) -> None:
    """Transformers' Trainer in the cell, nothing ktrain-specific in it: the monitor gets
    Trainer's logging steps (each once), progress reaches 100 % with an ETA that falls, and
    the model path and final loss come back to the kernel."""
    pytest.importorskip("transformers")
    pytest.importorskip("deepspeed")
    from jupyter_ktrain.backends.local import FileLogSource, LocalBackend
    from jupyter_ktrain.backends.results import progress_from_logs
    from jupyter_ktrain.monitor.live import model_from_logs

    out = tmp_path / "hf"
    done = run_notebook(NOTEBOOKS / "05-hf-finetune.ipynb", out)
    assert done.returncode == 0, done.stdout + done.stderr
    text = outputs_text(out / "05-hf-finetune.ipynb")
    # Trainer's own log history, returned by the job from rank 0
    logged = json.loads(re.findall(r"Trainer logged loss at steps (\[[\d, ]+\])", text)[0])
    (job,) = job_dirs(out)
    lines = [
        (log.stem, raw)
        for log in sorted(job.glob("node-*.log"))
        for raw in FileLogSource(log, log.stem).finish()
    ]
    model = model_from_logs(job.name, lines)
    for metric in ("loss", "learning_rate", "grad_norm", "epoch"):
        xs, _ys = model.metrics[(0, metric)].points()
        assert list(xs) == [float(s) for s in logged], metric  # Trainer's steps, each once
    assert not [key for key in model.metrics if key[0] != 0]  # from the process Trainer logs on
    assert model.progress is not None
    assert model.progress.percent == 100.0
    status = LocalBackend(home=out / "ktrain-home").status(job.name)
    assert status.progress is not None
    assert (status.progress.step, status.progress.total) == (logged[-1], logged[-1])
    updates = progress_from_logs(lines)
    etas = [u.eta_s for u in updates if u.eta_s is not None]
    assert updates[0].eta_s is None  # "unknown" until a few steps were timed
    assert len(etas) >= 3
    assert etas[-1] == 0.0
    assert etas[0] > etas[-1]
    for before, after in itertools.pairwise(etas):
        assert after <= 1.5 * before + 1.0, etas  # falls, give or take a slow step
    path = re.findall(r"model saved at (\S+): \[(.*)\]", text)[0]
    assert "model.safetensors" in path[1]
    assert Path(path[0]).is_dir()
    final = float(re.findall(r"final training loss: ([\d.]+)", text)[0])
    first, last = map(float, re.findall(r"loss: first ([\d.]+), last ([\d.]+)", text)[0])
    assert last < first
    assert min(last, first) <= final <= max(last, first)  # the mean over the run
