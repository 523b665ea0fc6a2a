"""The cell monitor in a real kernel: nbclient executes a notebook whose 2 x 2 local job
prints and reports a loss; the executed notebook's widget state shows what a user saw. And
the Cancel button, clicked (a real comm message) while the cell still blocks, stops the job."""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from jupyter_ktrain.backends.local import LocalBackend

from .widget_notebook import TRAIN, write_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kernel_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Kernels started by the test get this checkout's package and a private job registry."""
    home = tmp_path / "ktrain-home"
    monkeypatch.setenv("KTRAIN_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.delenv("KTRAIN_MONITOR", raising=False)
    return home


def _widget_states(nb: Any) -> dict[str, Any]:
    state: dict[str, Any] = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]
    return state["state"]  # type: ignore[no-any-return]


def _html_values(states: dict[str, Any]) -> list[str]:
    return [
        str(s["state"].get("value", "")) for s in states.values() if s["model_name"] == "HTMLModel"
    ]


def _plot_x_arrays(states: dict[str, Any]) -> list[list[float]]:
    """x arrays of the chart widget's traces as last sent (binary buffers, float64)."""
    out = []
    for s in states.values():
        for buf in s.get("buffers", []):
            if "x" in buf["path"]:
                raw = base64.b64decode(buf["data"])
                out.append(list(struct.unpack(f"<{len(raw) // 8}d", raw)))
    return out


def test_monitor_widget_in_a_real_kernel_shows_every_rank_a_growing_plot_and_success(
    tmp_path: Path, kernel_env: Path
) -> None:
    from nbclient import NotebookClient

    name = f"widget-kernel-{int(time.time())}"
    nb = nbformat.read(write_notebook(tmp_path / "monitor.ipynb", name), as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    texts = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))

    # the cell showed a widget (not text) and still ended with the result set
    outputs = nb.cells[2].outputs
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert "RESULT r=0" in texts
    monitor = json.loads(texts.split("MONITOR ", 1)[1].splitlines()[0])
    assert monitor["view"] == "MonitorView"
    assert monitor["state"] == "Succeeded"
    # the loss panel grew while the job ran: several redraws, each with more points, ending
    # with every rank's 16 steps
    points = monitor["loss_points"]
    assert len(points) >= 2, points
    assert points == sorted(points), points
    assert points[-1] == 4 * 16, points

    states = _widget_states(nb)
    html = _html_values(states)
    header = next(v for v in html if "●" in v)
    assert f"{name} · PyTorchJob on local · Succeeded" in header
    assert "2 node(s) × 2 proc(s)" in header
    logs = "\n".join(v for v in html if v.startswith("<pre"))
    for rank in range(4):
        assert re.search(rf"\[rank{rank}\]</span> rank {rank} step 16 loss", logs), rank
    table = next(v for v in html if v.startswith("<table"))
    assert table.count("Succeeded") == 2
    assert f"{name}-node-1" in table
    # the chart's last update carried a whole trace: steps 1..16
    assert [float(s) for s in range(1, 17)] in _plot_x_arrays(states)


def _comm_state(msg: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = msg["content"].get("data", {}).get("state", {})
    return state


@pytest.fixture
def kernel(kernel_env: Path) -> Iterator[Any]:
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_cancel_button_stops_the_job_while_the_cell_blocks(kernel: Any, kernel_env: Path) -> None:
    """The click is handled while the cell runs; the kernel reads busy all along (a status
    message of any parent is what JupyterLab's status bar and the server's kernel API show);
    the button ends as a disabled "Cancelled"; the cell fails with "cancelled by the user"."""
    kc = kernel
    name = f"widget-cancel-{int(time.time())}"
    for code in ("%load_ext jupyter_ktrain", TRAIN):
        assert kc.execute_interactive(code, timeout=60)["content"]["status"] == "ok"
    msg_id = kc.execute(
        f"%%ktrain --nodes 2 --procs-per-node 2 --name {name}\nr = train(400, 0.25)"
    )
    cancel_comm = filter_comm = None
    typed = False
    clicked_at = None
    stream = ""
    statuses: list[tuple[str, str]] = []  # (execution_state, parent msg_type), any parent
    iopub: list[tuple[str, str, str]] = []  # every message: (msg_type, state, parent msg_type)
    button: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            msg = kc.get_iopub_msg(timeout=30)
            kind = msg["msg_type"]
            parent_type = msg["parent_header"].get("msg_type", "")
            state = msg["content"].get("execution_state", "") if kind == "status" else ""
            iopub.append((kind, state, parent_type))
            if kind == "status":
                statuses.append((state, parent_type))
            if kind == "comm_msg" and msg["content"]["comm_id"] == cancel_comm:
                button.update(_comm_state(msg))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if kind == "comm_open" and _comm_state(msg).get("description") == "Cancel":
                cancel_comm = msg["content"]["comm_id"]
            elif kind == "comm_open" and _comm_state(msg).get("placeholder") == "filter lines…":
                filter_comm = msg["content"]["comm_id"]
            elif kind == "stream":
                stream += msg["content"]["text"]
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                break
            running = kind == "comm_msg" and "[rank3]" in str(_comm_state(msg).get("value", ""))
            if running and not typed and filter_comm is not None:
                # the user types in the filter box: handled by the subshell while the cell runs
                update = {"method": "update", "state": {"value": "rank"}, "buffer_paths": []}
                kc.shell_channel.send(
                    kc.session.msg("comm_msg", {"comm_id": filter_comm, "data": update})
                )
                typed = True
            handled = ("idle", "comm_msg") in statuses
            if running and handled and clicked_at is None and cancel_comm is not None:
                event = {"method": "custom", "content": {"event": "click"}}
                click = {"comm_id": cancel_comm, "data": event}
                kc.shell_channel.send(kc.session.msg("comm_msg", click))
                clicked_at = time.monotonic()
        assert clicked_at is not None, "the job never showed rank 3's lines"
        took = time.monotonic() - clicked_at
        status = LocalBackend(kernel_env).status(name)
        assert (status.state, status.reason) == ("Cancelled", "CancelledByUser")
        assert took < 30, took  # not the job's 100 s: the click was handled while it ran
        # the click's own status messages came from the control subshell, and each of its
        # idles was followed at once by busy: the kernel never read idle before the cell ended
        typed_at = statuses.index(("idle", "comm_msg"))  # the filter box, mid-run
        assert statuses[typed_at + 1] == ("busy", "execute_request"), statuses
        for i, (state, _parent) in enumerate(statuses[:-1]):
            if state == "idle":  # busy at once again, or the cell's own end right after
                assert statuses[i + 1][1] == "execute_request", statuses[i : i + 2]
        assert statuses[-1] == ("idle", "execute_request")
        # ... and nothing came between the two: not even one of the widget updates the cell's
        # thread sends all along (JupyterLab awaits each one's redraw, and would show idle
        # while it ran)
        for i, (kind, state, parent_type) in enumerate(iopub[:-1]):
            if kind == "status" and state == "idle" and parent_type != "execute_request":
                assert iopub[i + 1] == ("status", "busy", "execute_request"), iopub[i : i + 3]
        # the button tells the truth at the end
        assert button.get("description") == "Cancelled", button
        assert button.get("disabled") is True, button
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error"  # Run All stops at this cell
        assert f"Job {name!r} was cancelled by the user" in reply["content"]["evalue"] + stream
    finally:
        LocalBackend(kernel_env).cancel(name)
