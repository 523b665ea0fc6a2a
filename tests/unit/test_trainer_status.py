"""In a TrainJob, rank 0 sends progress and metrics to the Trainer's status endpoint.

A local HTTP server speaks the endpoint's side of Kubeflow Trainer v2.3.0's protocol
(pkg/statusserver): POST to ``.../trainjobs/NAME/status`` with ``Authorization: Bearer
TOKEN`` and an ``UpdateTrainJobStatusRequest`` body, checked against the CRD's
``trainerStatus`` schema of that release; 200 with the body back, or a ``metav1.Status``."""

from __future__ import annotations

import importlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from jupyter_ktrain.backends.kubernetes.status.derive import trainer_progress
from jupyter_ktrain.pod import trainer_status
from jupyter_ktrain.pod.trainer_status import StatusReporter, payload
from jupyter_ktrain.words import describe

SCHEMA = json.loads(
    (
        Path(__file__).resolve().parents[1]
        / "data/trainer/update-trainjob-status-v2.3.0.schema.json"
    ).read_text()
)
report_mod = importlib.import_module("jupyter_ktrain.pod.report")  # the module, not the function
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/llm-ft/status"


class Endpoint:
    """Records what arrives; answers like the controller's status server."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.bodies: list[dict[str, Any]] = []
        self.refused: list[int] = []
        self.fail_with: int | None = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                code, answer = outer.answer(self.path, self.headers.get("Authorization"), data)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps(answer).encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{PATH}"

    def answer(self, path: str, auth: str | None, data: bytes) -> tuple[int, Any]:
        def status(code: int, reason: str) -> tuple[int, Any]:
            self.refused.append(code)
            return code, {"status": "Failure", "reason": reason, "code": code}

        if path != PATH:
            return status(404, "NotFound")
        if auth != f"Bearer {self.token}":
            return status(403, "Forbidden")
        if self.fail_with is not None:
            return status(self.fail_with, "InternalError")
        body = json.loads(data)
        try:
            jsonschema.validate(body, SCHEMA)
        except jsonschema.ValidationError as exc:
            return status(422, f"Invalid: {exc.message}")
        self.bodies.append(body)
        return 200, body


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[Endpoint]:
    ep = Endpoint(token="tok-1")
    thread = threading.Thread(target=ep.server.serve_forever, daemon=True)
    thread.start()
    yield ep
    ep.server.shutdown()
    ep.server.server_close()


def _token(tmp_path: Path, value: str) -> str:
    path = tmp_path / "token"
    path.write_text(value + "\n")
    return str(path)


def _wait(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _metrics(body: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["value"] for m in body["trainerStatus"]["metrics"]}


def test_a_hand_written_loop_reaches_trainer_status_through_ktrain_report(
    endpoint: Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``enable()`` with the injected variables: every report(step, total) feeds it."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(report_mod, "_rank_cache", None)
    monkeypatch.setattr(report_mod, "_listeners", [])
    monkeypatch.setattr(trainer_status, "_reporter", None)
    env = {
        trainer_status.ENV_URL: endpoint.url,
        trainer_status.ENV_TOKEN: _token(tmp_path, "tok-1"),
        trainer_status.ENV_CA_CERT: str(tmp_path / "ca.crt"),  # unused over plain HTTP
    }
    reporter = trainer_status.enable(env)
    assert reporter is not None
    reporter.interval = 0.2
    t0 = time.time()
    for step in range(10):  # steps 0..9: ten of twenty done
        report_mod.report(step=step, total=20, loss=1.0 / (step + 1))
        time.sleep(0.03)
    _wait(lambda: len(endpoint.bodies) >= 1)
    time.sleep(0.3)
    sent = list(endpoint.bodies)
    # throttled: ten reports in ~0.3 s are one or two POSTs, not ten
    assert 1 <= len(sent) <= 3, sent
    last = sent[-1]["trainerStatus"]
    assert last["progressPercentage"] == 50  # step 10 of 20
    assert _metrics(sent[-1])["current_step"] == "10"
    assert _metrics(sent[-1])["total_steps"] == "20"
    assert float(_metrics(sent[-1])["loss"]) == pytest.approx(0.1)
    assert 0 <= last["estimatedRemainingSeconds"] <= 5  # 10 steps of ~0.03 s are left
    assert abs(trainer_progress(last).t - t0) < 5  # type: ignore[union-attr]
    for step in range(10, 20):
        report_mod.report(step=step, total=20)
    _wait(lambda: endpoint.bodies[-1]["trainerStatus"]["progressPercentage"] == 100)
    final = endpoint.bodies[-1]["trainerStatus"]
    assert final["estimatedRemainingSeconds"] == 0
    assert endpoint.refused == []


def test_percent_stays_below_100_until_the_last_step_and_the_limits_hold() -> None:
    from jupyter_ktrain.pod.progress import Progress

    almost = payload(Progress(998, 1000, 100.0, 3.0, 0.003), {}, 100.0)["trainerStatus"]
    assert almost["progressPercentage"] == 99
    many = {f"metric_{'x' * 80}_{i}": float(i) for i in range(300)}
    body = payload(Progress(1, 10, 100.0), many, 100.0)
    jsonschema.validate(body, SCHEMA)  # at most 256 metrics, names at most 64 characters
    assert "estimatedRemainingSeconds" not in body["trainerStatus"]  # unknown: left out
    assert body["trainerStatus"]["lastUpdatedTime"] == "1970-01-01T00:01:40Z"


def test_the_rotated_token_is_read_again_and_failures_never_raise(
    endpoint: Endpoint, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    token = _token(tmp_path, "old-token")
    reporter = StatusReporter(endpoint.url, token, interval=0.0)
    reporter.offer({"type": "metric", "step": 1, "total": 4, "t": 1.0})
    assert reporter.send() is False  # 403: the endpoint wants tok-1
    Path(token).write_text("tok-1")  # the kubelet rotated the projected token
    reporter.offer({"type": "metric", "step": 2, "total": 4, "t": 2.0})
    assert reporter.send() is True
    endpoint.fail_with = 500
    reporter.offer({"type": "metric", "step": 3, "total": 4, "t": 3.0})
    assert reporter.send() is False
    gone = StatusReporter("http://127.0.0.1:9/nothing", token, interval=0.0)
    gone.offer({"type": "metric", "step": 1, "total": 4, "t": 1.0})
    assert gone.send() is False
    err = capsys.readouterr().err
    assert err.count("could not update the TrainJob's trainerStatus (HTTP 403)") == 1
    assert "HTTP 500" not in err  # said once per reporter
    assert endpoint.refused == [403, 500]
    # the one that went through: step 2 of 4 done, counted from 0 (three of four)
    assert [b["trainerStatus"]["progressPercentage"] for b in endpoint.bodies] == [75]


def test_transformers_own_kubeflow_callback_is_left_alone(
    endpoint: Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reporter = StatusReporter(endpoint.url, _token(tmp_path, "tok-1"), interval=0.0)
    monkeypatch.setattr(trainer_status, "_reporter", reporter)
    trainer_status.defer("Transformers' own Kubeflow callback reports it")
    reporter.offer({"type": "metric", "step": 1, "total": 4, "t": 1.0})
    assert reporter.send() is False
    assert endpoint.bodies == []


def test_trainer_status_reads_back_as_progress() -> None:
    """What ``kubectl get trainjob`` shows becomes Job.status().progress (no logs needed)."""
    ours = payload(
        __import__("jupyter_ktrain.pod.progress", fromlist=["Progress"]).Progress(
            30, 120, 1_795_000_000.0, 90.0, 3.0
        ),
        {"loss": 0.25},
        1_795_000_000.0,
    )["trainerStatus"]
    p = trainer_progress(ours)
    assert p is not None
    assert (p.step, p.total, p.percent, p.eta_s) == (30, 120, 25.8, 90.0)  # 31 of 120 done
    # a writer that sends only the percentage (the Kubeflow SDK's update_trainjob_status)
    theirs = trainer_progress({"progressPercentage": 42, "lastUpdatedTime": "2026-06-12T03:00:00Z"})
    assert theirs is not None
    assert (theirs.percent, theirs.eta_s) == (42.0, None)
    assert trainer_progress(None) is None


def test_a_trainjob_status_with_trainer_status_gives_job_status_progress() -> None:
    """``Job.status()`` of a TrainJob nobody followed the logs of: from trainerStatus."""
    from jupyter_ktrain.backends.kubernetes.status.derive import build_status
    from jupyter_ktrain.pod.progress import Progress

    sent = payload(Progress(45, 100, 1_795_000_000.0, 3600.0, 80.0), {}, 1_795_000_000.0)
    job = {
        "kind": "TrainJob",
        "metadata": {"name": "llm-ft"},
        "spec": {},
        "status": {"conditions": [], **sent},
    }
    status = build_status(job, {}, {}, {}, {})
    assert status.progress is not None
    assert (status.progress.step, status.progress.total) == (45, 100)
    assert status.progress.remaining(1_795_000_060.0) == pytest.approx(3540.0)
    assert "46% (46/100) · 59m 00s left" in describe(status, 1_795_000_060.0)
    # what the logs said wins over what the endpoint last got (it is newer)
    mine = Progress(50, 100, 1_795_000_100.0, 3000.0, 60.0)
    assert build_status(job, {}, {}, {}, {}, progress=mine).progress == mine
