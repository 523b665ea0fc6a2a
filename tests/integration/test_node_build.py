"""The real node's builds (``tests/cluster/build/node.sh``, ``images.sh``) keep their own cache
keys: changing the node's versions does not move the control plane's cache folder (build.sh's
key), and the other way round for the node's; each waits for another build of its folder
under the same kind of lock as build.sh. Nothing is compiled: the builds run on copies of the
build folder, with a cache of this test's own (``KTRAIN_CLUSTER_CACHE``)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[1] / "cluster" / "build"

pytestmark = pytest.mark.skipif(shutil.which("go") is None, reason="the builds need Go")


def _dir(folder: Path, script: str, cache: Path) -> str:
    env = {**os.environ, "KTRAIN_CLUSTER_CACHE": str(cache)}
    done = subprocess.run([str(folder / script), "--print-dir"], capture_output=True, text=True,
                          env=env, timeout=60, check=True)  # fmt: skip
    return done.stdout.strip()


def test_the_node_and_the_control_plane_have_caches_of_their_own(tmp_path: Path) -> None:
    folder = tmp_path / "build"
    shutil.copytree(BUILD, folder, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    plane, node = _dir(folder, "build.sh", cache), _dir(folder, "node.sh", cache)
    assert Path(node).name.startswith("node-")
    assert plane != node
    env = folder / "node.env"
    env.write_text(env.read_text().replace("CONTAINERD_VERSION=", "CONTAINERD_VERSION=v9"))
    (folder / "kubelet.sum").write_text("")
    assert _dir(folder, "build.sh", cache) == plane  # the slow build is not redone
    assert _dir(folder, "node.sh", cache) != node
    versions = folder / "versions.env"  # a new Kubernetes release: both, the kubelet too
    versions.write_text(versions.read_text().replace("KUBE_VERSION=", "KUBE_VERSION=v9"))
    assert _dir(folder, "build.sh", cache) != plane


def test_a_second_node_build_waits_for_the_first_and_takes_its_result(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    out = Path(_dir(BUILD, "node.sh", cache))
    out.parent.mkdir(parents=True)
    env = {**os.environ, "KTRAIN_CLUSTER_CACHE": str(cache)}
    with open(f"{out}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        second = subprocess.Popen([str(BUILD / "node.sh")], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        time.sleep(1.5)
        assert second.poll() is None  # waiting
        assert not Path(f"{out}.partial").exists()
        (out / "bin").mkdir(parents=True)
        (out / ".complete").touch()  # the first build "finished"
        fcntl.flock(lock, fcntl.LOCK_UN)
    got, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    assert got.strip() == str(out)
    assert "waiting for another build" in err
