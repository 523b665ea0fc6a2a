"""A kernel's connections to the API server, on the test cluster: every ``%ktrain`` command
opens its own backend, whose job watches (three streams a job) end with it, and a job nobody
reads for a while is not watched any more; reading it again watches it anew."""

from __future__ import annotations

import contextlib
import gc
import os
import threading

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.status import watch

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _to(port: int) -> int:
    """This process's open TCP connections to ``port`` on this machine (the kernel's to the API
    server; the test cluster's proxy in this process, which holds the other end of a stream a
    while longer, as a server does, is not counted)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as fh:
            for row in fh.readlines()[1:]:
                cols = row.split()
                remote, state = int(cols[2].rsplit(":", 1)[1], 16), cols[3]
                count += cols[9] in inodes and remote == port and state == "01"  # ESTABLISHED
    return count


def _api_port(test_cluster) -> int:  # type: ignore[no-untyped-def]
    server = next(ln for ln in test_cluster.kubeconfig.read_text().splitlines() if "server:" in ln)
    return int(server.strip().rsplit(":", 1)[1])


def _watching(job: str) -> list[str]:
    prefix = f"watch-{job}"
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_commands_leave_no_watches_and_an_unread_job_is_not_watched(
    k8s_shell, test_cluster, capsys, monkeypatch
):
    job = k8s_shell.run_cell_magic(
        "ktrain", "--nodes 1 --procs-per-node 1 --image local/python --name quiet", "steps(2, 0)\n"
    )
    assert job.state == "Succeeded", capsys.readouterr().out
    gc.collect()
    port = _api_port(test_cluster)
    before, threads = _to(port), len(_watching("quiet"))

    # fifteen status commands: each answered from a watch of its own, ended with its backend
    for _ in range(15):
        assert k8s_shell.run_cell("%ktrain status quiet").success
    assert "quiet on kubernetes: Succeeded" in capsys.readouterr().out
    gc.collect()
    try:
        wait_for(lambda: _to(port) <= before and len(_watching("quiet")) <= threads, 20)
    except AssertionError:
        raise AssertionError(
            f"connections to the API server {before} -> {_to(port)}, watch threads "
            f"{threads} -> {len(_watching('quiet'))}"
        ) from None

    # the cell's job handle still watches it; nobody reads it: the watch stops when idle
    monkeypatch.setattr(watch, "IDLE_S", 1.0)
    monkeypatch.setattr(watch, "REAP_S", 0.2)
    assert _watching("quiet")
    wait_for(lambda: not _watching("quiet"), 30)

    # read again, it is watched anew and says the same
    assert job.status().state == "Succeeded"
    assert _watching("quiet")
