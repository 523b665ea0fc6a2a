"""The in-job hooks: a Transformers Trainer reports by itself; without Transformers nothing
changes, and the package never imports it."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.pod.protocol import parse_line

PACKAGE = Path(__file__).resolve().parents[2] / "jupyter_ktrain"
ROOT = PACKAGE.parent

TRAINER_PROGRAM = """
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        ids = (torch.arange(8) + i) % 16
        return {"input_ids": ids, "labels": ids}

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=16, n_positions=8, n_embd=16, n_layer=1, n_head=2))
args = TrainingArguments(output_dir="out", per_device_train_batch_size=4, max_steps=6,
                         logging_steps=2, use_cpu=True, report_to="none", save_strategy="no",
                         disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=Tokens())
from jupyter_ktrain.pod.profiling import steps
marks = []
steps.on_boundary(lambda step: marks.append(step) is not None)  # every step boundary
trainer.train()
print("LOG_HISTORY " + __import__("json").dumps(trainer.state.log_history))
print("MARKS " + __import__("json").dumps(marks))
"""


def _run(program: str, tmp_path: Path, *python_args: str, env: dict[str, str]) -> list[str]:
    path = tmp_path / "program.py"
    path.write_text(program)
    done = subprocess.run(
        [sys.executable, *python_args, "-m", "jupyter_ktrain.pod.runtime", str(path)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


@pytest.mark.slow
def test_a_trainer_in_the_program_reports_its_logging_steps_and_progress(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    env = {**os.environ, "RANK": "0", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    lines = [parse_line(raw) for raw in _run(TRAINER_PROGRAM, tmp_path, env=env)]
    history = json.loads(
        next(ln.text for ln in lines if ln.text.startswith("LOG_HISTORY "))[len("LOG_HISTORY ") :]
    )
    records = [ln.record for ln in lines if ln.record and ln.record["type"] == "metric"]
    logged = [h["step"] for h in history if "loss" in h]
    assert logged == [2, 4, 6]  # Trainer's own logging steps (logging_steps=2, 6 steps)
    # its closing summary repeats epoch at the last step: the monitor gets it once
    assert [h["step"] for h in history if "epoch" in h] == [2, 4, 6, 6]
    for name in ("loss", "learning_rate", "grad_norm", "epoch", "train_loss"):
        want = list(dict.fromkeys(h["step"] for h in history if name in h))
        steps = [r["step"] for r in records if name in r]
        assert steps == want, (name, records)  # Trainer's steps for it, each once
    for h in history:
        if "loss" in h:
            (rec,) = [r for r in records if r["step"] == h["step"] and "loss" in r]
            assert rec["loss"] == pytest.approx(h["loss"])
    assert [r["step"] for r in records if "train_loss" in r] == [6]  # the closing summary
    assert {r["total"] for r in records} == {6}
    assert records[0]["step"] == 0  # progress from the first moment: 0 of 6
    assert records[-1]["step"] == 6
    # every step is a step boundary (where `ktrain profile` starts and stops), not only the
    # steps it reports
    marks = next(ln.text for ln in lines if ln.text.startswith("MARKS "))
    assert json.loads(marks[len("MARKS ") :]) == [0, 1, 2, 3, 4, 5, 6]


LIGHTNING_PROGRAM = """
import torch
import pytorch_lightning as pl

class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

torch.manual_seed(0)
x = torch.randn(64, 4)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
trainer = pl.Trainer(max_steps=6, log_every_n_steps=2, accelerator="cpu", devices=1,
                     logger=pl.loggers.CSVLogger("logs"), enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=8))
print("CSV " + trainer.logger.log_dir)
"""


@pytest.mark.slow
def test_a_lightning_trainer_reports_what_its_own_logger_writes(tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    import csv

    env = {**os.environ, "RANK": "0", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    lines = [parse_line(raw) for raw in _run(LIGHTNING_PROGRAM, tmp_path, env=env)]
    log_dir = next(ln.text for ln in lines if ln.text.startswith("CSV "))[4:]
    with open(tmp_path / log_dir / "metrics.csv") as f:
        written = [(int(row["step"]), float(row["train_loss"])) for row in csv.DictReader(f)]
    records = [ln.record for ln in lines if ln.record and ln.record["type"] == "metric"]
    reported = [(r["step"], r["train_loss"]) for r in records if "train_loss" in r]
    assert [s for s, _ in written] == [1, 3, 5]  # Lightning's own logging steps
    assert [s for s, _ in reported] == [s for s, _ in written]
    assert [v for _, v in reported] == pytest.approx([v for _, v in written])
    assert {r["total"] for r in records} == {6}
    assert records[-1]["step"] == 6  # progress reaches the end


def test_without_transformers_a_job_runs_and_the_package_imports_none_of_it(
    tmp_path: Path,
) -> None:
    """The pod side alone (as it travels), no site-packages: no Transformers, no torch."""
    from jupyter_ktrain.packaging.layer import runner_files

    for path, data in runner_files("/lib").items():
        target = tmp_path / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    program = (
        "import importlib.util, sys\n"
        "assert importlib.util.find_spec('transformers') is None, 'transformers is here'\n"
        "import jupyter_ktrain as ktrain\n"
        "for step in range(1, 4):\n"
        "    ktrain.report(step=step, total=3, loss=1.0 / step)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('transformers', 'torch', 'accelerate', 'lightning', 'pytorch_lightning'))\n"
        "print('HEAVY', heavy)\n"
    )
    env = {"RANK": "0", "PYTHONPATH": str(tmp_path / "lib"), "PATH": os.environ["PATH"]}
    site = "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' not in p]; "
    (tmp_path / "lib" / "sitecustomize.py").write_text(site.replace("; ", "\n"))
    lines = [parse_line(raw) for raw in _run(program, tmp_path, "-s", env=env)]
    assert "HEAVY []" in [ln.text for ln in lines]
    metrics = [ln.record for ln in lines if ln.record and ln.record["type"] == "metric"]
    assert [(r["step"], r["total"]) for r in metrics] == [(1, 3), (2, 3), (3, 3)]
    assert [ln.record for ln in lines if ln.record and ln.record["type"] == "exit"] == [
        {"type": "exit", "rank": 0, "code": 0}
    ]


def test_no_module_of_the_package_imports_a_training_library() -> None:
    banned = {"transformers", "accelerate", "lightning", "pytorch_lightning", "torch"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in banned]
    assert found == []
