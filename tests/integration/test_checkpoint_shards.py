"""Checkpoints every rank writes a part of (``jupyter_ktrain.pod.checkpoint.shards``): sharded
state through ``torch.distributed.checkpoint.async_save`` and a DeepSpeed engine with its
decoupled writer, each on two real CPU ranks (the node's agent running torchrun, gloo, as a
pod runs them), killed for real and resumed bit-identically."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

SHARDED = """
import os, signal, sys
import torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
import jupyter_ktrain as ktrain

def main(steps, kill_at, folder, out):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    fully_shard(model, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ckpt = ktrain.checkpoint(folder)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    start = 0
    found = ckpt.load(state)  # every rank reads its shards into the state in place
    if found is not None:
        set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = found[1] + 1
    for step in range(start, steps):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1000 * step + rank))
        torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        opt.step()
        opt.zero_grad()
        if step % 3 == 2:
            msd, osd = get_state_dict(model, opt)
            ckpt.save({"model": msd, "optim": osd}, step)  # DTensors: sharded by itself
            if step == kill_at and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # its write in flight, or done
    ckpt.wait()
    whole = {k: v.full_tensor() for k, v in model.state_dict().items()}
    if rank == 0:
        torch.save({"start": start, "w": whole}, out)
    dist.destroy_process_group()

if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
"""

DEEPSPEED = """
import os, signal, sys
import torch
import jupyter_ktrain as ktrain

CONFIG = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 3},
    "zero_allow_untested_optimizer": True,
    "steps_per_print": 10_000,
    "checkpoint": {"writer": {"decoupled": True, "type": "python"}},
}

def main(steps, kill_at, folder, out):
    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=CONFIG)
    assert engine.checkpoint_engine.is_decoupled()
    ckpt = ktrain.checkpoint(folder)
    start = 0
    found = ckpt.load(engine)
    if found is not None:
        start = found[1] + 1
    for step in range(start, steps):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1000 * step + rank))
        engine.backward(torch.nn.functional.mse_loss(engine(x), x.sum(1, keepdim=True)))
        engine.step()
        if step % 3 == 2:
            ckpt.save(engine, step)
        if step == kill_at and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
    ckpt.wait()  # the last save committed: "latest" names it
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params):
        weights = [p.detach().clone() for p in params]
    if rank == 0:
        torch.save({"start": start, "w": weights}, out)
    engine.destroy()

if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
"""


def _whole_and_killed(
    tmp: Path, script: str, steps: int, kill_at: int
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The run to its end (into ``a``, ``whole.pt``) and the run whose rank 1 is killed after
    step ``kill_at`` (into ``b``), side by side: each waits on its ranks' start-up, most of
    its time (DeepSpeed's import, its writer processes'), and neither reads the other's."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        whole = pool.submit(_torchrun, tmp, script, steps, -1, tmp / "a", tmp / "whole.pt")
        killed = pool.submit(_torchrun, tmp, script, steps, kill_at, tmp / "b", tmp / "killed.pt")
        return whole.result(), killed.result()


def _torchrun(tmp: Path, script: str, *args: object) -> subprocess.CompletedProcess[str]:
    """Two ranks under torchrun under the node's agent, as in a pod (the agent stops what a
    killed rank leaves running, its DeepSpeed writer process); its files in a folder of its
    own, so two run at once."""
    tmp = Path(tempfile.mkdtemp(dir=tmp, prefix="run-"))
    path = tmp / "train.py"
    path.write_text(textwrap.dedent(script))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "DS_ACCELERATOR": "cpu",
        "CROSS_RANK": "0",  # what the job's runtime sets for DeepSpeed (one node here)
        "CROSS_SIZE": "1",
        "RANK": "",
    }
    cmd = [sys.executable, "-m", "jupyter_ktrain.pod.agent", "--gpu-sampling", "off", "--"]
    cmd += [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += ["--standalone", str(path), *map(str, args)]
    out, err = tmp / "out.txt", tmp / "err.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(cmd, env=env, stdout=o, stderr=e, start_new_session=True)
        try:
            code = proc.wait(timeout=400)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(cmd, code, out.read_text(), err.read_text())


def _running(pid: int) -> bool:
    try:
        return b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line.split("@@ktrain ", 1)[1]) for line in out.splitlines()
            if "@@ktrain " in line]  # fmt: skip


def _same(a: Path, b: Path) -> bool:
    x, y = torch.load(a), torch.load(b)
    wx, wy = x["w"], y["w"]
    pairs = (
        zip(wx.values(), wy.values(), strict=True)
        if isinstance(wx, dict)
        else zip(wx, wy, strict=True)
    )
    return all(torch.equal(p, q) for p, q in pairs)


@pytest.mark.slow
def test_sharded_state_is_written_by_every_rank_in_the_background_and_resumes_bit_identically(
    tmp_path: Path,
) -> None:
    whole, killed = _whole_and_killed(tmp_path, SHARDED, 9, 5)
    assert whole.returncode == 0, whole.stderr[-3000:]
    saved = [r for r in _records(whole.stdout) if r["type"] == "checkpoint"]
    assert [(r["step"], r["file"]) for r in saved] == [
        (2, "dcp/step-2"),
        (5, "dcp/step-5"),
        (8, "dcp/step-8"),
    ]
    for r in saved:  # staged, then written: the two add up to the whole save
        assert r["blocked_s"] > 0
        assert r["write_s"] > 0
        assert r["blocked_s"] + r["write_s"] == pytest.approx(r["seconds"], abs=2e-4)
    dcp = tmp_path / "a" / "dcp"
    assert (dcp / "latest").read_text() == "step-8"
    # each rank wrote its own shard; the coordinator the metadata
    assert sorted(os.listdir(dcp / "step-8")) == [".metadata", "__0_0.distcp", "__1_0.distcp"]

    # rank 1 SIGKILLed right after the save of step 5 returned (its write in flight or done)
    assert killed.returncode != 0
    latest = (tmp_path / "b" / "dcp" / "latest").read_text()
    assert latest in ("step-2", "step-5")
    assert (tmp_path / "b" / "dcp" / latest / ".metadata").is_file()  # never a partial tag
    resumed = _torchrun(tmp_path, SHARDED, 9, -1, tmp_path / "b", tmp_path / "resumed.pt")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    [resume] = [r for r in _records(resumed.stdout) if r["type"] == "resume"]
    assert resume["file"] == f"dcp/{latest}"
    assert torch.load(tmp_path / "resumed.pt")["start"] == int(latest[5:]) + 1
    assert _same(tmp_path / "whole.pt", tmp_path / "resumed.pt")


@pytest.mark.slow
@pytest.mark.timeout(
    900
)  # three DeepSpeed runs (two at once), each importing it and starting its writers
def test_a_deepspeed_engine_with_the_decoupled_writer_commits_latest_only_when_written(
    tmp_path: Path,
) -> None:
    pytest.importorskip("deepspeed")
    whole, killed = _whole_and_killed(tmp_path, DEEPSPEED, 8, 6)
    assert whole.returncode == 0, whole.stderr[-3000:]
    saved = [r for r in _records(whole.stdout) if r["type"] == "checkpoint"]
    assert [(r["step"], r["file"]) for r in saved] == [(2, "deepspeed/step-2"),
                                                       (5, "deepspeed/step-5")]  # fmt: skip
    for r in saved:  # queued to the writer process, then written there
        assert r["blocked_s"] > 0
        assert r["write_s"] >= 0
        assert r["bytes"] > 0
    assert (tmp_path / "a" / "deepspeed" / "latest").read_text() == "step-5"

    # killed after step 6: step 5 was queued but is committed only at the next save or the
    # end, so "latest" still names step 2, which is whole
    assert killed.returncode != 0
    # the killed rank's writer process did not outlive it (torchrun signals only live ranks)
    writer = re.search(r"global_rank=1 +self.ckpt_process.pid=(\d+)", killed.stdout)
    assert writer is not None, killed.stdout[-3000:]
    assert not _running(int(writer[1])), f"the killed rank's writer (pid {writer[1]}) lives on"
    assert "left running by a rank that ended" in killed.stdout
    assert (tmp_path / "b" / "deepspeed" / "latest").read_text() == "step-2"
    resumed = _torchrun(tmp_path, DEEPSPEED, 8, -1, tmp_path / "b", tmp_path / "resumed.pt")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert torch.load(tmp_path / "resumed.pt")["start"] == 3
    assert _same(tmp_path / "whole.pt", tmp_path / "resumed.pt")
