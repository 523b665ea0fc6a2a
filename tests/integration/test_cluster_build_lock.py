"""``tests/cluster/build/build.sh`` builds one cache folder at a time: while another build holds
the lock beside the folder, a second build waits (writing no ``.partial`` folder) and then takes
the first one's result; printing the folder, or a build already cached, does not wait.

The lock is held here as build.sh's own ``flock`` holds it (the same kernel lock, through
``fcntl.flock``), on a cache of this test's own (``KTRAIN_CLUSTER_CACHE``), so nothing is
compiled: the build waited for is "finished" by writing its ``.complete`` mark."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[1] / "cluster" / "build" / "build.sh"

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="build.sh needs Go")


def run_build(cache: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KTRAIN_CLUSTER_CACHE": str(cache)}
    return subprocess.run(
        [str(BUILD), *args], capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


@contextmanager
def held_lock(out: Path) -> Iterator[None]:
    """Holds the lock a running build.sh holds for the cache folder ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{out}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def test_a_second_build_waits_for_the_first_and_takes_its_result(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = Path(run_build(cache, "--print-dir").stdout.strip())
    assert out.parent == cache
    with held_lock(out):
        # printing the folder does not wait
        printed = run_build(cache, "--print-dir", timeout=10)
        assert printed.returncode == 0
        assert printed.stdout.strip() == str(out)
        env = {**os.environ, "KTRAIN_CLUSTER_CACHE": str(cache)}
        second = subprocess.Popen(
            [str(BUILD)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        try:
            assert second.stderr is not None
            said = second.stderr.readline()  # it says it waits, then waits
            assert "waiting for another build" in said
            assert f"{out}.lock" in said
            time.sleep(0.5)  # were it not waiting, it would be writing now
            assert second.poll() is None
            assert not Path(f"{out}.partial").exists()
            # the first build finishes while the lock is held
            out.mkdir()
            (out / ".complete").touch()
        except BaseException:
            second.kill()
            second.wait()
            raise
    stdout, stderr = second.communicate(timeout=30)
    assert second.returncode == 0, stderr
    assert stdout.strip().splitlines()[-1] == str(out)
    assert not Path(f"{out}.partial").exists()  # it built nothing of its own


def test_a_cached_build_does_not_wait_for_the_lock(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = Path(run_build(cache, "--print-dir").stdout.strip())
    out.mkdir(parents=True)
    (out / ".complete").touch()
    with held_lock(out):
        cached = run_build(cache, timeout=10)
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout.strip() == str(out)
    assert "waiting" not in cached.stderr
