"""The suite's last check: a process a test leaves behind fails the run (tests/procwatch.py).
Run on a throwaway test file in a pytest of its own, as the real suite runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEAKY = """
import os, subprocess, time

def test_leaves_two_processes_behind():
    # its own session, our environment: found by the environment mark
    subprocess.Popen(["sleep", "311"], start_new_session=True)
    # re-parented to init with an environment of its own: found by the descendant sampler
    subprocess.run(
        ["sh", "-c", "sleep 312 >/dev/null 2>&1 & sleep 0.6"], env={"PATH": os.environ["PATH"]}
    )
    time.sleep(1.0)

def test_clean():
    subprocess.run(["true"], check=True)
"""


def _alive(pattern: str) -> bool:
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return bool(found.stdout.strip())


def test_a_process_left_behind_fails_the_run_and_is_killed(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.procwatch", "-c", os.devnull,
         "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path / "test_leaky.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert "2 passed" in out, out
    assert run.returncode == 1, out
    assert "2 process(es) started by the tests were still alive (now killed)" in out, out
    assert "sleep 311" in out, out
    assert "sleep 312" in out, out
    assert not _alive("sleep 311")
    assert not _alive("sleep 312")


def test_a_clean_run_passes(tmp_path: Path) -> None:
    body = "import subprocess\n\ndef test_x():\n    subprocess.run(['true'], check=True)\n"
    (tmp_path / "test_clean.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.procwatch", "-c", os.devnull,
         "--rootdir", str(tmp_path), "-p", "no:cacheprovider", str(tmp_path / "test_clean.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
