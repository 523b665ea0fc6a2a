"""A local job whose rank is killed mid-run restarts, resumes from its last checkpoint and
ends with the same weights as an uninterrupted run: real torchrun jobs through the
``%%ktrain`` magic, a real SIGKILL, the monitor's loss series read back as the side panel
serves it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.server.core import PanelCore

from ..resume_cells import SETUP

pytestmark = pytest.mark.slow


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    assert sh.run_cell(SETUP, store_history=True).success
    yield sh
    sh.reset(new_session=True)


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_a_killed_rank_resumes_from_the_checkpoint_and_ends_as_an_uninterrupted_run(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cell = "%%ktrain --nodes 2 --procs-per-node 2 --name {}\nw, first = train(12, 3, {}, {!r})\n"
    assert shell.run_cell(cell.format("whole", None, str(tmp_path))).error_in_exec is None
    whole, _ = shell.user_ns["w"], capsys.readouterr()
    result = shell.run_cell(cell.format("resumed", 7, str(tmp_path)))
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    # killed after step 7, the last checkpoint was step 5: the run that finished began at 6
    assert shell.user_ns["first"] == 6
    assert all(torch.equal(a, b) for a, b in zip(shell.user_ns["w"], whole, strict=True))
    status = LocalBackend().status("resumed")
    assert (status.state, [r.restarts for r in status.replicas]) == ("Succeeded", [1, 1])
    assert "[ktrain] resumed from step 5 (checkpoint step-5.pt)" in out, out
    assert "resumed-node-1 restarted after exit 137" in out
    # the side panel's metrics: each step's loss once, equal to the uninterrupted run's
    core = PanelCore({"local": LocalBackend})
    panel = core.metrics("resumed")
    assert panel["notices"] == ["resumed from step 5 (checkpoint step-5.pt)"]
    # the loss panel (each rank's step time has one of its own)
    [loss] = [p for p in panel["panels"] if p["name"] == "loss"]
    [plain] = [p for p in core.metrics("whole")["panels"] if p["name"] == "loss"]
    assert [(m["x"], m["text"]) for m in loss["markers"]] == [(5.0, "resumed from step 5")]
    assert plain["markers"] == []
    for trace, reference in zip(loss["traces"], plain["traces"], strict=True):
        assert trace["x"] == [float(s) for s in range(12)], trace["label"]
        assert trace["y"] == reference["y"], trace["label"]
    # the checkpoints: in the job's folder, the newest three kept
    folder = LocalBackend().job_dir("resumed") / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["step-11.pt", "step-5.pt", "step-8.pt"]


DEEPSPEED_SETUP = """
import os, signal
import torch
import jupyter_ktrain as ktrain

CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 3},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 10_000,
}

def ds_train(steps=8, every=3, kill_at=None, marks=None):
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=CONFIG)
    ckpt = ktrain.checkpoint()
    start = 0
    found = ckpt.load(engine)  # every rank loads its own shards
    if found is not None:
        start = found[1] + 1
    for step in range(start, steps):
        data = torch.Generator().manual_seed(1000 * step + rank)  # the step's batch, resumed too
        x = torch.randn(4, 8, generator=data)
        loss = torch.nn.functional.mse_loss(engine(x), x.sum(1, keepdim=True))
        engine.backward(loss)
        engine.step()
        ktrain.report(step=step, total=steps, loss=loss.item())
        if step % every == every - 1:
            ckpt.save(engine, step)
        mark = os.path.join(marks or ".", "killed")
        if kill_at == step and rank == world - 1 and not os.path.exists(mark):
            open(mark, "a").close()
            os.kill(os.getpid(), signal.SIGKILL)
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params):  # ZeRO-3 holds shards: the whole weights
        weights = [p.detach().clone() for p in params]
    return weights, start
"""


def test_a_deepspeed_zero3_engine_saves_and_resumes_through_ktrain_checkpoint(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A real DeepSpeed engine (ZeRO-3 on two CPU ranks): ``ckpt.save(engine, step)`` writes
    its shards into ``deepspeed/``; a rank SIGKILLed after step 4 restarts the node, and
    ``ckpt.load(engine)`` resumes from step 2, ending bit-equal to an uninterrupted run."""
    pytest.importorskip("deepspeed")
    assert shell.run_cell(DEEPSPEED_SETUP, store_history=True).success
    flags = "--nodes 1 --procs-per-node 2 --env DS_ACCELERATOR=cpu --env OMP_NUM_THREADS=1"
    cell = f"%%ktrain {flags} --name {{}}\nw, first = ds_train(8, 3, {{}}, {str(tmp_path)!r})\n"
    assert shell.run_cell(cell.format("ds-whole", None)).error_in_exec is None
    whole, _ = shell.user_ns["w"], capsys.readouterr()
    result = shell.run_cell(cell.format("ds-resumed", 4))
    out = _plain(capsys.readouterr().out)
    assert result.error_in_exec is None, out
    assert "[ktrain] resumed from step 2 (checkpoint deepspeed/step-2)" in out, out
    assert shell.user_ns["first"] == 3
    assert all(torch.equal(a, b) for a, b in zip(shell.user_ns["w"], whole, strict=True))
    folder = LocalBackend().job_dir("ds-resumed") / "checkpoints" / "deepspeed"
    assert sorted(p.name for p in folder.glob("step-*")) == ["step-2", "step-5"]
    assert (folder / "latest").read_text() == "step-5"
