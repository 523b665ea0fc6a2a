"""The kernel reads busy for the whole of a ``%%ktrain`` cell, in a real kernel driven the way
JupyterLab 4.6 drives it under Run All: every cell queued at once, and a
``create_subshell_request`` on the control channel as soon as the widget's comm opens (what
JupyterLab's CommHandler sends for the first comm of a target). That request's ``idle`` comes
from the control thread while the cell still runs; JupyterLab's status bar shows the last
status of any parent, so each such idle must be followed at once by ``busy``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .widget_notebook import TRAIN

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from jupyter_client.manager import start_new_kernel

    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path / "ktrain-home"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("KTRAIN_MONITOR", raising=False)
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _run_all(kc: Any, cells: list[str], timeout: float = 120) -> dict[str, list[Any]]:
    """Queue ``cells`` at once (Run All) and act like JupyterLab on iopub; every iopub message
    per cell's msg_id, and the status sequence of any parent as (state, parent msg_id)."""
    ids = [kc.execute(code) for code in cells]
    seen: dict[str, list[Any]] = {i: [] for i in ids}
    statuses: list[tuple[str, str, str]] = []
    asked: set[str] = set()
    done: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(done) < len(ids):
        assert time.monotonic() < deadline, f"cells still running: {len(ids) - len(done)}"
        msg = kc.get_iopub_msg(timeout=timeout)
        parent = msg["parent_header"].get("msg_id", "")
        kind = msg["msg_type"]
        if kind == "status":
            state = msg["content"]["execution_state"]
            statuses.append((state, parent, msg["parent_header"].get("msg_type", "")))
            if state == "idle" and parent in seen:
                done.add(parent)
        if parent in seen:
            seen[parent].append(msg)
        target = msg["content"].get("target_name") if kind == "comm_open" else None
        if target == "jupyter.widget" and parent in seen and parent not in asked:
            # JupyterLab asks at the first widget comm of the kernel; here at each job cell's
            # first, so that every cell meets the race
            asked.add(parent)
            kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
    return {"ids": ids, "statuses": statuses, **seen}


def test_kernel_reads_busy_for_the_whole_ktrain_cell_under_run_all(kernel: Any) -> None:
    kc = kernel
    cells = [
        "%load_ext jupyter_ktrain",
        TRAIN,
        "%%ktrain --nodes 1 --procs-per-node 2 --name busy-a\na = train(12, 0.25)",
        "%%ktrain --nodes 1 --procs-per-node 2 --name busy-b\nb = train(12, 0.25)",
        "print(a, b)",
    ]
    got = _run_all(kc, cells)
    statuses = got["statuses"]
    for cell in (2, 3):
        msg_id = got["ids"][cell]
        replies = got[msg_id]
        assert any(m["msg_type"] == "comm_open" for m in replies), "no widget in the cell"
        first = statuses.index(("busy", msg_id, "execute_request"))
        last = statuses.index(("idle", msg_id, "execute_request"))
        window = statuses[first:last]
        foreign = [s for s in window if s[1] != msg_id]
        assert any(s[2] == "create_subshell_request" for s in foreign), foreign
        # every idle inside the cell (a control or subshell request's own end) is followed at
        # once by busy: the kernel never rests on idle before the cell's own idle
        for i, (state, _parent, kind) in enumerate(window):
            if state == "idle":
                after = [*window, ("idle", msg_id, "execute_request")][i + 1]
                assert after[0] == "busy", f"cell {cell}: {kind}'s idle stays: {window[i:]}"
        # the idle that ends it is the cell's own, and it comes after the job ended
        assert statuses[last] == ("idle", msg_id, "execute_request")
    texts = "".join(m["content"].get("text", "") for m in got[got["ids"][4]])
    assert texts.strip() == "0 0", texts
