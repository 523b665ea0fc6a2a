"""ktrain.checkpoint(): atomic saves by rank 0, the newest K kept, load() only ever returns a
whole checkpoint (also after a save killed half-way by a real SIGKILL), records for the
monitor, DeepSpeed engines saved into the same folder."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import jupyter_ktrain as ktrain
from jupyter_ktrain.pod.checkpoint import plain as ckpt_mod
from jupyter_ktrain.pod.protocol import format_rank_line, parse_line

report_mod = importlib.import_module("jupyter_ktrain.pod.report")


@pytest.fixture(autouse=True)
def written() -> Iterator[None]:
    """Every test's last save is on disk before the next test (one writer per process)."""
    yield
    ckpt_mod.wait_all()


@pytest.fixture
def rank0(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In a job's rank 0 (records are written), outside torch.distributed."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(report_mod, "_rank_cache", None)
    yield
    report_mod._rank_cache = None


def _records(out: str) -> list[dict[str, Any]]:
    recs = [parse_line(format_rank_line(0, line)).record for line in out.splitlines()]
    return [r for r in recs if r is not None]


def _state(seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 64, generator=g), "rng": g.get_state(), "epoch": seed}


def test_save_then_load_gives_the_newest_state_and_step_and_reports_both(
    tmp_path: Path, rank0: None, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = ktrain.checkpoint(tmp_path)
    assert ckpt.load() is None  # a first run: nothing to resume from
    ckpt.save(_state(1), 10)
    path = ckpt.save(_state(2), 20)
    assert path == tmp_path / "step-20.pt"
    found = ckpt.load()
    assert found is not None
    state, step = found
    assert step == 20
    assert torch.equal(state["w"], _state(2)["w"])
    assert torch.equal(state["rng"], _state(2)["rng"])
    assert sorted(os.listdir(tmp_path)) == ["step-10.pt", "step-20.pt"]  # no temporary left
    saved = [r for r in _records(capsys.readouterr().out) if r["type"] == "checkpoint"]
    assert [r["step"] for r in saved] == [10, 20]
    assert saved[1]["bytes"] == path.stat().st_size
    assert 0 < saved[1]["seconds"] < 10
    assert saved[1]["rank"] == 0
    ckpt.load()
    (resumed,) = _records(capsys.readouterr().out)
    assert (resumed["type"], resumed["step"], resumed["file"]) == ("resume", 20, "step-20.pt")


def test_the_newest_k_are_kept(tmp_path: Path) -> None:
    ckpt = ktrain.checkpoint(tmp_path, keep=2)
    for step in (1, 2, 3, 10):
        ckpt.save({"step": step}, step)
    assert [s for s, _ in ckpt.steps()] == [3, 10]  # by step, not by name (10 > 3)
    assert ckpt.load() == ({"step": 10}, 10)


def test_only_rank_0_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    ktrain.checkpoint(tmp_path).save({"x": 1}, 5)
    assert not tmp_path.exists() or not os.listdir(tmp_path)


def test_an_unreadable_newest_checkpoint_is_skipped_for_the_one_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = ktrain.checkpoint(tmp_path)
    ckpt.save(_state(1), 1)
    ckpt.save(_state(2), 2)
    ckpt.wait()  # on disk
    newest = tmp_path / "step-2.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # storage lost data
    found = ckpt.load()
    assert found is not None
    assert found[1] == 1
    assert "checkpoint step-2.pt cannot be read" in capsys.readouterr().err


def test_save_returns_once_staged_and_the_write_is_of_the_state_as_it_was(
    tmp_path: Path, rank0: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Training goes on while the checkpoint is written, changing its tensors in place; the
    file holds them as they were at save()."""
    import threading

    release = threading.Event()
    real_save = ckpt_mod._save

    def slow_save(state: Any, f: Any) -> None:  # a slow disk: the write waits for the test
        assert release.wait(30)
        real_save(state, f)

    monkeypatch.setattr(ckpt_mod, "_save", slow_save)
    ckpt = ktrain.checkpoint(tmp_path)
    state = _state(1)
    ckpt.save(state, 5)  # returns while the write waits
    assert not (tmp_path / "step-5.pt").exists()
    state["w"].add_(1.0)  # the next optimizer step, in place
    state["epoch"] = 99
    release.set()
    ckpt.wait()
    saved = torch.load(tmp_path / "step-5.pt", weights_only=False)
    assert torch.equal(saved["w"], _state(1)["w"])
    assert saved["epoch"] == 1
    records = [r for r in _records(capsys.readouterr().out) if r["type"] == "checkpoint"]
    (record,) = records
    assert record["blocked_s"] < record["seconds"]  # training waited only for the staging
    assert record["write_s"] > 0


class FakeEngine:
    """What DeepSpeed's engine does with a checkpoint folder, on one rank: each save writes a
    tag folder; ``load_checkpoint`` reads ``latest`` when no tag is given."""

    def __init__(self, weights: float = 0.0) -> None:
        self.weights = weights
        self.latest_written: list[bool] = []

    def save_checkpoint(
        self, save_dir: str, tag: str, client_state: dict[str, Any], save_latest: bool = True
    ) -> None:
        self.latest_written.append(save_latest)
        folder = Path(save_dir, tag)
        folder.mkdir(parents=True)
        torch.save({"weights": self.weights, "client": client_state}, folder / "model.pt")

    def load_checkpoint(self, load_dir: str) -> tuple[str | None, dict[str, Any] | None]:
        tag = Path(load_dir, "latest").read_text().strip()
        saved = torch.load(Path(load_dir, tag, "model.pt"))
        self.weights = saved["weights"]
        return str(Path(load_dir, tag)), saved["client"]


def test_a_deepspeed_engine_saves_and_loads_itself_in_the_same_folder(
    tmp_path: Path, rank0: None, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = ktrain.checkpoint(tmp_path, keep=2)
    assert ckpt.load(FakeEngine()) is None
    engine = FakeEngine()
    for step in (1, 2, 3):
        engine.weights = float(step)
        ckpt.save(engine, step)
    assert engine.latest_written == [False] * 3  # "latest" is ours, written atomically
    root = tmp_path / "deepspeed"
    assert sorted(os.listdir(root)) == ["latest", "step-2", "step-3"]
    assert (root / "latest").read_text() == "step-3"
    fresh = FakeEngine()
    assert ckpt.load(fresh) == ({}, 3)
    assert fresh.weights == 3.0
    records = _records(capsys.readouterr().out)
    assert [(r["type"], r["step"]) for r in records] == [
        ("checkpoint", 1),
        ("checkpoint", 2),
        ("checkpoint", 3),
        ("resume", 3),
    ]
    assert records[0]["file"] == "deepspeed/step-1"
    assert records[0]["bytes"] > 0


def test_the_folder_is_the_jobs_or_a_private_one_outside_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ckpt_mod.CHECKPOINTS_ENV, str(tmp_path / "job"))
    assert ktrain.checkpoint().folder == tmp_path / "job"
    monkeypatch.delenv(ckpt_mod.CHECKPOINTS_ENV)
    outside = ktrain.checkpoint().folder
    assert outside.is_dir()
    assert outside == ktrain.checkpoint().folder  # one per process
    assert not os.listdir(outside)


@pytest.mark.parametrize("step", [-1, 1.5, "3", None, True])
def test_a_bad_step_is_one_clear_error(tmp_path: Path, step: object) -> None:
    with pytest.raises(ValueError, match="step is an integer >= 0"):
        ktrain.checkpoint(tmp_path).save({}, step)  # type: ignore[arg-type]
    assert not tmp_path.joinpath("step-3.pt").exists()


def test_keep_must_keep_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep >= 1"):
        ktrain.checkpoint(tmp_path, keep=0)


def test_a_rank_under_torchrun_gets_the_node_variables_deepspeeds_decoupled_writer_reads() -> None:
    """DeepSpeed's launcher sets CROSS_RANK/CROSS_SIZE and its decoupled checkpoint writer
    fails without them; torchrun sets neither, so the job's runtime derives them."""
    from jupyter_ktrain.pod.ranks import node_env

    env = {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "RANK": "5"}
    assert node_env(env) == {"CROSS_RANK": "1", "CROSS_SIZE": "2"}
    assert node_env({"RANK": "0"}) == {}  # not said how many ranks a node has: left alone


# DCP says it saves in one process: what this test means (warnings are errors in the tests)
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")
def test_sharded_true_writes_through_torch_distributed_checkpoint_and_loads_in_place(
    tmp_path: Path, rank0: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """One process (no process group): ``sharded=True`` goes through DCP's async_save all the
    same; ``load(state)`` fills the given tensors in place."""
    ckpt = ktrain.checkpoint(tmp_path)
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(3))
    ckpt.save({"w": w}, 4, sharded=True)
    saved = w.clone()
    w.add_(1.0)  # training goes on: the checkpoint is of the state as it was
    ckpt.wait()
    assert (tmp_path / "dcp" / "latest").read_text() == "step-4"
    into = {"w": torch.zeros(256, 256)}
    assert ckpt.load(into) == (into, 4)
    assert torch.equal(into["w"], saved)
    kinds = [(r["type"], r["file"]) for r in _records(capsys.readouterr().out)]
    assert kinds == [("checkpoint", "dcp/step-4"), ("resume", "dcp/step-4")]
    plain = ktrain.checkpoint(tmp_path / "plain")
    plain.save({"w": w}, 1, block=True)
    with pytest.raises(ValueError, match=r"without sharded=True: load them with ckpt.load\(\)"):
        plain.load({"w": torch.zeros(256, 256)})
