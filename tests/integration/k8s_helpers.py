"""Shared pieces of the Kubernetes backend tests: an IPython shell configured (through
``%ktrain config``) to use the test cluster, and a little polling helper."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from tests.notebook_cells import ALLREDUCE_TRAIN

SETUP = (
    ALLREDUCE_TRAIN
    + """
def steps(n, pause):
    rank = int(os.environ["RANK"])
    for i in range(n):
        print(f"rank {rank} step {i}", flush=True)
        time.sleep(pause)
    return rank

def numbered(n, pause):
    rank = int(os.environ["RANK"])
    for i in range(n):
        print(f"line {i}", flush=True)
        time.sleep(pause)
    return rank

def fail_on(bad_rank, how):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starting", flush=True)
    if rank == bad_rank:
        if how == "exit":
            print("about to fail: the loader found no data", flush=True)
            raise SystemExit(1)
        if how == "nccl":
            print("[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation timeout: "
                  "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 ms before timing out.",
                  flush=True)
            raise SystemExit(6)
        if how == "oom":
            print("allocating", flush=True)
            time.sleep(600)
    time.sleep(600)

def sleepy():
    print("sleeping", flush=True)
    time.sleep(600)
"""
)


def make_shell(test_cluster: Any, **config: str) -> InteractiveShell:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    assert sh.run_cell(SETUP, store_history=True).success
    pairs = {"backend": "kubernetes", "kubeconfig": str(test_cluster.kubeconfig), **config}
    sh.run_line_magic("ktrain", "config " + " ".join(f"{k}={v}" for k, v in pairs.items()))
    return sh


def configured_shell(
    test_cluster: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[InteractiveShell]:
    """Body of each test module's ``k8s_shell`` fixture: a private KTRAIN_HOME, configured."""
    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path / "ktrain-home"))
    sh = make_shell(test_cluster)
    yield sh
    sh.reset(new_session=True)


@contextlib.contextmanager
def panel_listing(name: str) -> Iterator[list[tuple[str, str]]]:
    """The side panel's job list, polled every 0.3 s while the body runs, as the panel polls
    it: job ``name``'s (state, message) at each poll that lists it."""
    from jupyter_ktrain.server.core import PanelCore

    panel, listed, stop = PanelCore.from_names(["kubernetes"]), [], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            for job in panel.jobs()["jobs"]:
                if job["name"] == name:
                    listed.append((job["state"], job["message"]))
            stop.wait(0.3)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        yield listed
    finally:
        stop.set()
        poller.join(30)


def wait_for(pred: Callable[[], Any], timeout: float = 60, every: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s")


def checkpoint_claim(test_cluster: Any, tmp_path: Any) -> str:
    """A ReadWriteMany PersistentVolumeClaim for ``--checkpoints``, made as the notebook user;
    returns its name."""
    import uuid

    claim = f"ckpt-{uuid.uuid4().hex[:8]}"
    pvc = tmp_path / "pvc.yaml"
    pvc.write_text(
        "apiVersion: v1\nkind: PersistentVolumeClaim\n"
        f"metadata: {{name: {claim}}}\n"
        "spec: {accessModes: [ReadWriteMany], resources: {requests: {storage: 1Gi}}}\n"
    )
    assert test_cluster.kubectl("apply", "-f", str(pvc)).returncode == 0
    return claim
