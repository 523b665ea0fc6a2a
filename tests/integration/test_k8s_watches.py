"""A kernel's connections to the API server, on the test cluster: every ``%ktrain`` command
opens its own backend, whose job watches (three streams a job) end with it, and a job nobody
reads for a while is not watched any more; reading it again watches it anew."""

from __future__ import annotations

import gc
import os
import threading

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes import watch

from .k8s_helpers import configured_shell, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _sockets() -> int:
    """Open sockets of this process (the kernel's, here)."""
    fds = os.listdir("/proc/self/fd")
    count = 0
    for fd in fds:
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


def _watching(job: str) -> list[str]:
    prefix = f"watch-{job}"
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix) and t.is_alive()]


def test_commands_leave_no_watches_and_an_unread_job_is_not_watched(k8s_shell, capsys, monkeypatch):
    job = k8s_shell.run_cell_magic(
        "ktrain", "--nodes 1 --procs-per-node 1 --image local/python --name quiet", "steps(2, 0)\n"
    )
    assert job.state == "Succeeded", capsys.readouterr().out
    gc.collect()
    before, threads = _sockets(), len(_watching("quiet"))

    # fifteen status commands: each answered from a watch of its own, ended with its backend
    for _ in range(15):
        assert k8s_shell.run_cell("%ktrain status quiet").success
    assert "quiet on kubernetes: Succeeded" in capsys.readouterr().out
    gc.collect()
    try:
        wait_for(lambda: _sockets() <= before + 1 and len(_watching("quiet")) <= threads, 20)
    except AssertionError:
        raise AssertionError(
            f"sockets {before} -> {_sockets()}, watch threads {threads} -> "
            f"{len(_watching('quiet'))}"
        ) from None

    # the cell's job handle still watches it; nobody reads it: the watch stops when idle
    monkeypatch.setattr(watch, "IDLE_S", 1.0)
    monkeypatch.setattr(watch, "REAP_S", 0.2)
    assert _watching("quiet")
    wait_for(lambda: not _watching("quiet"), 30)

    # read again, it is watched anew and says the same
    assert job.status().state == "Succeeded"
    assert _watching("quiet")
