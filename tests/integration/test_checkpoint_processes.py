"""ktrain.checkpoint(): atomic saves by rank 0, the newest K kept, load() only ever returns a
whole checkpoint (also after a save killed half-way by a real SIGKILL), records for the
monitor, DeepSpeed engines saved into the same folder.

The tests of tests/unit/test_checkpoint.py that start processes (a unit test starts none)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import jupyter_ktrain as ktrain
from jupyter_ktrain.pod.checkpoint import plain as ckpt_mod

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def written() -> Iterator[None]:
    """Every test's last save is on disk before the next test (one writer per process)."""
    yield
    ckpt_mod.wait_all()


KILLED_SAVE = """
import sys, torch
import jupyter_ktrain as ktrain
ckpt = ktrain.checkpoint(sys.argv[1])
ckpt.save({"w": torch.zeros(4), "n": 1}, 1)
print("saved", flush=True)
ckpt.save({"w": torch.ones(200 * 1024 * 1024 // 4)}, 2)  # 200 MB: killed while it is written
print("not reached", flush=True)
"""


def test_a_save_killed_half_way_leaves_the_previous_checkpoint_loadable(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, str(folder)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "saved\n"
    partial = folder / f".step-2.pt.tmp-{proc.pid}"
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size > 1024 * 1024):
        assert proc.poll() is None, "the save ended before it was caught"
        assert time.monotonic() < deadline, "no temporary file grew"
        time.sleep(0.001)
    os.kill(proc.pid, signal.SIGKILL)  # mid-write, as the OOM killer or a node loss would
    assert proc.wait(timeout=10) == -signal.SIGKILL
    proc.stdout.close()
    written = partial.stat().st_size
    assert 0 < written < 200 * 1024 * 1024  # it really was half-way
    ckpt = ktrain.checkpoint(folder)
    assert [s for s, _ in ckpt.steps()] == [1]  # the partial one is not a checkpoint
    found = ckpt.load()
    assert found is not None
    state, step = found
    assert (step, state["n"]) == (1, 1)
    assert torch.equal(state["w"], torch.zeros(4))
    ckpt.save({"n": 3}, 3)  # the next save clears what the killed one left
    ckpt.wait()
    assert sorted(os.listdir(folder)) == ["step-1.pt", "step-3.pt"]


FULL_DISK = """
import torch
import jupyter_ktrain as ktrain
ckpt = ktrain.checkpoint({folder!r})
ckpt.save({{"w": torch.ones(1024 * 1024)}}, 1)  # 4 MB on a 2 MB disk: the write fails later
print("training went on", flush=True)
"""


def test_a_write_that_fails_in_the_background_fails_the_rank_at_its_end(tmp_path: Path) -> None:
    """A real 2 MiB tmpfs fills up while the checkpoint is written behind training: the rank
    does not end as if its checkpoint were safe."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip()}): needs root")
    try:
        program = tmp_path / "program.py"
        program.write_text(FULL_DISK.format(folder=str(mount)))
        done = subprocess.run(
            [sys.executable, "-m", "jupyter_ktrain.pod.runtime", str(program)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(ROOT), "RANK": "0"},
        )
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert "training went on" in done.stdout
    assert done.returncode == 1, done.stdout + done.stderr
    assert "No space left on device" in done.stdout + done.stderr
    assert not list(mount.glob("step-*.pt"))


def test_importing_it_imports_only_the_standard_library() -> None:
    code = textwrap.dedent(
        """
        import sys
        import jupyter_ktrain.pod.checkpoint.plain
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout  # fmt: skip
    assert out.strip() == "[]"


def test_a_job_without_checkpoint_storage_is_told_its_checkpoints_will_not_survive(
    tmp_path: Path,
) -> None:
    """In a job (the agent set its exit folder) with no ``--checkpoints``: rank 0 is told where
    its checkpoints went and what to give instead; outside a job nothing is said."""
    code = (
        "import jupyter_ktrain as ktrain\n"
        "c = ktrain.checkpoint()\n"
        "c.save({'w': 1}, 0)\n"
        "print(c.load())\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTRAIN_")}
    env["PYTHONPATH"] = str(root)
    outside = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert outside.returncode == 0, outside.stderr
    assert "({'w': 1}, 0)" in outside.stdout
    assert "checkpoint storage" not in outside.stderr
    env.update({"KTRAIN_EXIT_DIR": str(tmp_path), "RANK": "0"})
    inside = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert inside.returncode == 0, inside.stderr
    assert "this job has no checkpoint storage" in inside.stderr
    assert "--checkpoints PVC:/checkpoints" in inside.stderr
