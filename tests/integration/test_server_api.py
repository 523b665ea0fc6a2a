"""The side panel's REST API in a real ``jupyter server`` with token auth, over HTTP (httpx).

The extension is enabled by the very config file the package installs
(``jupyter-config/jupyter_server_config.d/jupyter_ktrain.json``, found through
``JUPYTER_CONFIG_PATH``), so this also checks that file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.jupyter_process import PanelServer as Server
from tests.jupyter_process import panel_server

from ..panel_jobs import run_job, start_job

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DONE = "api-done"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api")
    home = tmp / "ktrain-home"
    run_job(home, DONE, nodes=2, steps=4)
    with panel_server(tmp, home) as server:
        yield server


def test_root_answers_and_jobs_lists_the_finished_job(server: Server) -> None:
    with server.client() as c:
        assert c.get("").json()["version"]
        r = c.get("jobs")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    [job] = r.json()["jobs"]
    assert (job["name"], job["backend"], job["state"]) == (DONE, "local", "Succeeded")


def test_job_logs_offset_and_metrics_over_http(server: Server) -> None:
    with server.client() as c:
        detail = c.get(f"jobs/{DONE}").json()
        assert [r["exit_code"] for r in detail["replicas"]] == [0, 0]
        logs = c.get(f"jobs/{DONE}/logs").json()
        texts = {line["text"] for line in logs["lines"]}
        assert {"rank 0 step 4 hello", "rank 1 step 4 hello"} <= texts
        rank1 = c.get(f"jobs/{DONE}/logs", params={"rank": 1, "grep": "step 2"}).json()
        assert [line["text"] for line in rank1["lines"]] == ["rank 1 step 2 hello"]
        rest = c.get(f"jobs/{DONE}/logs", params={"offset": logs["next_offset"]}).json()
        assert rest["lines"] == []
        panels = c.get(f"jobs/{DONE}/metrics").json()["panels"]
        [panel] = [p for p in panels if p["name"] == "loss"]  # step time has a panel too
        assert {t["label"] for t in panel["traces"]} == {"rank 0", "rank 1"}


def test_errors_are_json_with_the_right_status(server: Server) -> None:
    with server.client() as c:
        missing = c.get("jobs/no-such-job")
        assert missing.status_code == 404
        assert "no-such-job" in missing.json()["error"]
        assert c.get("jobs/no-such-job/logs").status_code == 404
        assert c.post("jobs/no-such-job/cancel").status_code == 404
        bad = c.get(f"jobs/{DONE}/logs", params={"rank": "x"})
        assert bad.status_code == 400
        assert "rank" in bad.json()["error"]
        assert c.get("jobs/Bad_Name").status_code == 400
        assert c.get("jobs/no-such-job/stacks").status_code == 404
        ended = c.get(f"jobs/{DONE}/stacks")  # the tab's Stacks button on an ended job
        assert ended.status_code == 400
        assert ended.json()["error"].startswith(f"{DONE!r} has ended (Succeeded)")
        assert c.get(f"jobs/{DONE}/stacks", params={"rank": "x"}).status_code == 400


def test_without_token_every_call_is_refused(server: Server) -> None:
    with server.client(token=False) as c:
        paths = ("jobs", f"jobs/{DONE}", f"jobs/{DONE}/logs", f"jobs/{DONE}/metrics")
        for path in (*paths, f"jobs/{DONE}/stacks"):
            assert c.get(path).status_code in (401, 403), path
        refused = c.post(f"jobs/{DONE}/cancel")
        assert refused.status_code in (401, 403)
    with server.client() as c:
        assert c.get(f"jobs/{DONE}").json()["state"] == "Succeeded"


def test_cancel_over_http_stops_a_running_job(server: Server) -> None:
    job = start_job(server.home, "api-running", nodes=2)
    try:
        with server.client() as c:
            deadline = time.monotonic() + 60
            while c.get("jobs/api-running").json()["state"] != "Running":
                assert time.monotonic() < deadline
                time.sleep(0.3)
            # the tab's Stacks button: every rank's stack, taken now; a rank it lacks refused
            # (the job runs before its ranks do: until they started, none has a stack)
            while (
                not (stacks := c.get("jobs/api-running/stacks"))
                .json()["text"]
                .startswith("Stacks of 'api-running', 2 ranks")
            ):
                assert stacks.status_code == 200, stacks.text
                said = stacks.json()["text"]
                assert "nothing to show yet" in said or said.startswith("Stacks of"), said
                assert time.monotonic() < deadline
                time.sleep(0.3)
            assert abs(stacks.json()["t"] - time.time()) < 60
            beyond = c.get("jobs/api-running/stacks", params={"rank": 2})
            assert beyond.status_code == 400
            assert "there is no rank 2" in beyond.json()["error"]
            r = c.post("jobs/api-running/cancel")
            assert r.status_code == 200, r.text
            assert r.json()["terminal"] is True
            states = {j["name"]: j["state"] for j in c.get("jobs").json()["jobs"]}
        assert states["api-running"] != "Running"
        assert job.status().terminal
    finally:
        if not job.status().terminal:
            job.cancel()


def test_panel_reads_the_users_config_at_each_request_and_survives_a_dead_cluster(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_ktrain.config import set_config
    from tests.unreachable import CONTEXT, closed_kubeconfig

    monkeypatch.setenv("KTRAIN_HOME", str(server.home))  # the server's user config
    kubeconfig, url = closed_kubeconfig(tmp_path)
    with server.client() as c:
        assert c.get("jobs").json()["problems"] == []
        # the user points the notebook at a cluster: the running server follows at once
        set_config(["backend=kubernetes", f"kubeconfig={kubeconfig}", f"context={CONTEXT}"])
        try:
            started = time.monotonic()
            payload = c.get("jobs").json()
            took = time.monotonic() - started
        finally:
            set_config(["backend=", "kubeconfig=", "context="])
        assert DONE in [j["name"] for j in payload["jobs"]]  # local jobs still listed
        [problem] = payload["problems"]
        assert problem["backend"] == "kubernetes"
        error = problem["error"]
        assert error.startswith(f"cannot reach {url}: connection refused ")
        assert f"(kubeconfig {kubeconfig}, context {CONTEXT})" in error
        assert "\n" not in error
        assert "Max retries" not in error
        assert "HTTPSConnectionPool" not in error
        assert took < 5, took
        assert c.get("jobs").json()["problems"] == []  # and back, without a restart


def test_the_last_profile_in_the_metrics_and_its_traces_as_downloads(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    from jupyter_ktrain.store.profiles import keep_profile

    monkeypatch.setenv("KTRAIN_HOME", str(server.home))
    trace = gzip.compress(b'{"traceEvents": []}')
    said = {"t": 1234.5, "steps": 3, "text": "Profile of 'api-done': 2 ranks", "ranks": []}
    keep_profile("local", DONE, said, {0: trace, 1: trace})
    with server.client() as c:
        shown = c.get(f"jobs/{DONE}/metrics").json()["profile"]
        assert shown["text"] == "Profile of 'api-done': 2 ranks"
        assert shown["t"] == 1234.5
        assert [t["rank"] for t in shown["traces"]] == [0, 1]
        r = c.get(shown["traces"][1]["path"])
        assert r.status_code == 200, r.text
        assert r.content == trace
        assert r.headers["content-disposition"] == (
            f'attachment; filename="{DONE}-rank1.trace.json.gz"'
        )
        missing = c.get(f"jobs/{DONE}/profile/rank7.trace.json.gz")
        assert missing.status_code == 404
        assert missing.json()["error"] == (
            f"{DONE!r} has no kept trace of rank 7: `%ktrain profile {DONE} --steps 3` takes one."
        )
    with server.client(token=False) as c:
        assert c.get(shown["traces"][0]["path"]).status_code == 403
