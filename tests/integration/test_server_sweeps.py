"""The side panel's sweeps API (``/ktrain/api/sweeps[/NAME]``) in a real ``jupyter server``
over HTTP, on real sweeps run by ``ktrain.sweep`` in a Python process of their own beside
it: the list and the sweep's detail while it runs and once it ended (a failed trial's reason,
the best), and a sweep whose process was killed mid-run read as Interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jupyter_ktrain.backends.local import LocalBackend
from tests.jupyter_process import PanelServer, panel_server

pytestmark = pytest.mark.slow

SCRIPT = """
import sys, time
import jupyter_ktrain as ktrain

def graded(x):
    # x=3 fails at once; the others report a falling loss for about 2 s (x=9: for minutes)
    if x == 3:
        raise ValueError("x=3 is refused")
    for step in range(1200 if x == 9 else 10):
        ktrain.report(step=step, loss=x + 1.0 / (step + 1))
        time.sleep(0.2)
    return x

if __name__ == "__main__":
    name, space = sys.argv[1], sys.argv[2]
    ktrain.sweep(graded, {"x": space}, objective="loss:min", parallel=2, no_prune=True,
                 nodes=1, procs_per_node=1, name=name)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PanelServer]:
    tmp = tmp_path_factory.mktemp("sweeps")
    home = tmp / "ktrain-home"
    with panel_server(tmp, home) as server:
        yield server
    for status in LocalBackend(home).list_jobs():  # no trial outlives its test
        LocalBackend(home).delete(status.name)


def _listed(server: PanelServer, name: str) -> list[dict[str, Any]]:
    with server.client() as c:
        return [s for s in c.get("sweeps").json()["sweeps"] if s["name"] == name]


def _sweep(server: PanelServer, name: str, space: str) -> subprocess.Popen[str]:
    script = server.home.parent / "sweep_script.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "KTRAIN_HOME": str(server.home), "KTRAIN_MONITOR": "text"}
    return subprocess.Popen(
        [sys.executable, str(script), name, space], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def _wait(read: Callable[[], Any], ok: Callable[[Any], bool], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = read()
        if ok(got):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.2)


def test_a_sweep_listed_and_shown_while_it_runs_and_once_it_ended(server: PanelServer) -> None:
    proc = _sweep(server, "apisw", "choice(1,2,3)")
    with server.client() as c:
        listed = _wait(lambda: _listed(server, "apisw"), lambda s: s and s[0]["running"], 60)
        [running] = listed
        assert (running["name"], running["state"], running["total"]) == ("apisw", "Running", 3)
        live = c.get("sweeps/apisw").json()
        assert live["state"] == "Running"
        assert "Running" in {r["state"] for r in live["rows"]}
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out[-3000:]
        [done] = _listed(server, "apisw")
        detail = c.get("sweeps/apisw").json()
    by_x = {r["params"][0]: r for r in detail["rows"]}
    assert {x: r["state"] for x, r in by_x.items()} == {
        "1": "Succeeded", "2": "Succeeded", "3": "Failed"
    }  # fmt: skip
    assert by_x["3"]["reason"].endswith("ValueError: x=3 is refused"), by_x["3"]["reason"]
    assert by_x["1"]["best"]
    assert by_x["1"]["objective"] == "1.1"  # its last loss, 1 + 1/10
    assert (done["state"], done["done"], done["total"]) == ("Done", 3, 3)
    assert (done["best"], done["best_objective"]) == (by_x["1"]["number"], pytest.approx(1.1))
    assert done["best_text"] in out  # the cell's line and the panel say the same best
    assert detail["header"].startswith("Sweep 'apisw' · Done · 3 of 3 trials done · best: ")
    assert detail["names"] == ["x"]
    curves = {c["trial"]: c for c in detail["curves"]}
    assert sorted(curves) == sorted(by_x[x]["number"] for x in ("1", "2"))  # x=3 reported none
    assert [len(c["x"]) for c in curves.values()] == [10, 10]


def test_a_sweep_whose_process_was_killed_reads_interrupted(server: PanelServer) -> None:
    proc = _sweep(server, "apikill", "choice(9)")
    with server.client() as c:
        _wait(lambda: c.get("sweeps/apikill"),
              lambda r: r.status_code == 200 and len(r.json()["curves"]) == 1, 60)  # fmt: skip
        proc.send_signal(signal.SIGKILL)  # the kernel restarted mid-sweep, say
        proc.communicate(timeout=30)
        detail = c.get("sweeps/apikill").json()
        assert detail["state"] == "Interrupted"
        assert [r["state"] for r in detail["rows"]] == ["Interrupted"]
        assert [s["state"] for s in _listed(server, "apikill")] == ["Interrupted"]
        missing = c.get("sweeps/no-such-sweep")
        assert missing.status_code == 404
        assert "No sweep named 'no-such-sweep'" in missing.json()["error"]
        bad = c.get("sweeps/Bad_Name")
        assert bad.status_code == 400
        assert "'Bad_Name' is not a valid sweep name" in bad.json()["error"], bad.json()
        assert "The panel's Sweeps list shows the sweeps" in bad.json()["error"], bad.json()
    with server.client(token=False) as c:
        assert c.get("sweeps").status_code == 403
