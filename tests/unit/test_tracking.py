"""Tracking's pure parts: records -> points, the steps-sent memory, params, the URI check, spare
CPU; and the sender's bounded buffer and its holding for spare CPU against a tracking server
that refuses (a closed port: a request it tried is its one warning)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from jupyter_ktrain.config import check_uri
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.pod.protocol import (
    format_agent_line,
    format_rank_line,
    format_record,
    parse_line,
)
from jupyter_ktrain.store.records import RunRecord
from jupyter_ktrain.tracking.cpu import Sample, SpareCpu, spare_cores
from jupyter_ktrain.tracking.params import code_hash, constants, flat
from jupyter_ktrain.tracking.points import Point, Reading, RecordReader, SentSteps


def _rank(rank: int, record: dict[str, object]) -> object:
    return parse_line(format_rank_line(rank, format_record(record)))


def test_metrics_are_keyed_by_rank_at_their_step_or_their_ordinal() -> None:
    reader = RecordReader()
    got = reader.read(_rank(0, {"type": "metric", "step": 7, "t": 10.5, "loss": 0.5}), 0.0)
    assert got.points == [Point("loss", 0.5, 7, 10500)]
    got = reader.read(_rank(2, {"type": "metric", "step": 7, "t": 11.0, "loss": 2.5}), 0.0)
    assert got.points == [Point("rank2/loss", 2.5, 7, 11000)]
    # no step: 0, 1, 2 ... per series, the same on a replay of the same lines
    steps = [
        reader.read(_rank(0, {"type": "metric", "acc": a}), 1.0).points[0].step for a in (1, 2)
    ]
    assert steps == [0, 1]
    assert reader.read(parse_line(format_rank_line(0, "plain text")), 0.0).points == []


def test_gpu_samples_take_mlflows_system_metric_names() -> None:
    line = parse_line(format_agent_line(format_record(
        {"type": "gpu", "node": 1, "gpu": 0, "t": 5.0, "util": 97.0, "mem_used": 1024.0,
         "mem_total": 4096.0, "power": 300.0, "temp": 60.0}
    )))  # fmt: skip
    points = {p.key: p.value for p in RecordReader().read(line, 0.0).points}
    assert points == {
        "system/node_1/gpu_0_utilization_percentage": 97.0,
        "system/node_1/gpu_0_memory_usage_megabytes": pytest.approx(1073.741824),
        "system/node_1/gpu_0_memory_usage_percentage": 25.0,
        "system/node_1/gpu_0_power_usage_watts": 300.0,
        "system/node_1/gpu_0_temperature_celsius": 60.0,
    }


def test_restarts_and_resumes_are_tags() -> None:
    reader = RecordReader()
    resume = reader.read(_rank(0, {"type": "resume", "step": 40, "file": "step-40.pt"}), 0.0)
    assert resume.tags == {"ktrain.resumes": "1", "ktrain.resumed_from_step": "40"}
    line = parse_line(format_agent_line(format_record({"type": "restart", "n": 2, "max": 3})))
    assert reader.read(line, 0.0).tags == {"ktrain.launcher_restarts": "2"}


def test_sent_steps_are_ranges_that_merge_and_survive_a_round_trip() -> None:
    sent = SentSteps()
    for step in [0, 1, 2, 5, 4, 3, 9]:
        sent.add("loss", step)
    assert sent.as_dict() == {"loss": [[0, 5], [9, 9]]}
    again = SentSteps(sent.as_dict())
    assert ("loss", 3) in again
    assert ("loss", 6) not in again
    assert ("lr", 0) not in again
    assert again.count() == 7


def test_params_are_the_flags_flattened_and_the_programs_literal_constants() -> None:
    assert flat({"nodes": 2, "resources": {"gpus": 8}, "env": [("A", "1")]}) == {
        "nodes": "2",
        "resources.gpus": "8",
        "env": "[['A', '1']]",
    }
    source = "LR = 3e-4\nLAYERS: list = [64, 64]\n_private = 1\nmodel = make()\nLR = 1e-3\n"
    assert constants(source) == {"const.LR": "0.001", "const.LAYERS": "[64, 64]"}
    assert code_hash({"a.py": b"x"}) != code_hash({"a.py": b"y"})


def test_a_tracking_uri_is_checked_and_credentials_refused() -> None:
    assert check_uri("http://mlflow:5000") == "http://mlflow:5000"
    assert check_uri("off") == "off"
    with pytest.raises(SpecError, match="is not a tracking URI"):
        check_uri("mlflow:5000")
    with pytest.raises(SpecError, match="MLFLOW_TRACKING_PASSWORD"):
        check_uri("https://me:secret@mlflow.example")


def test_a_refusing_server_is_one_warning_and_the_buffer_drops_the_oldest_beyond_its_bound(
    tmp_path: object,
) -> None:
    pytest.importorskip("mlflow")
    from jupyter_ktrain.tracking.mlflow_run import MlflowRun

    with socket.socket() as s:  # a port nothing listens on: every request is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    record = {"started": time.time(), "mlflow": {"uri": f"http://127.0.0.1:{port}",
                                                 "experiment": "x", "sent": {}}}  # fmt: skip
    run = MlflowRun(
        "local", "refused", RunRecord.from_json(record), max_pending=10, interval=0.05, retry_s=0.05
    )
    try:
        run.add(Reading(points=[Point("loss", float(i), i, 0) for i in range(25)]))
        deadline = time.monotonic() + 20
        warnings: list[str] = []
        while time.monotonic() < deadline and not any("did not take" in w for w in warnings):
            warnings += run.take_warnings()
            time.sleep(0.05)
        time.sleep(0.5)  # more failed tries: still one warning
        warnings += run.take_warnings()
        assert sum("did not take the job's data" in w for w in warnings) == 1, warnings
        assert sum("buffer of 10 points is full" in w for w in warnings) == 1, warnings
        assert run.dropped == 15
        assert run.pending == 10
        assert run.sent.count() == 0
    finally:
        run.close()


def test_spare_cores_are_the_machines_idle_time_narrowed_by_a_containers_quota(
    tmp_path: Path,
) -> None:
    # two idle cores of four for 2 s, then a container of 1.5 cores that used 1 of them
    assert spare_cores(Sample(10.0, 100.0), Sample(12.0, 104.0)) == pytest.approx(2.0)
    assert spare_cores(
        Sample(10.0, 100.0, used=50.0, quota=1.5), Sample(12.0, 104.0, used=52.0, quota=1.5)
    ) == pytest.approx(0.5)
    assert spare_cores(Sample(1.0, None), Sample(2.0, None)) == float("inf")  # unknown: spare
    # read from the files a Linux machine and a cgroup v2 container have
    (tmp_path / "proc").mkdir()
    cgroup = tmp_path / "sys/fs/cgroup"
    cgroup.mkdir(parents=True)
    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "proc/stat").write_text(f"cpu  7895 12 1581 {3 * ticks} {ticks} 0 31 0 0 0\n")
    (cgroup / "cpu.max").write_text("150000 100000\n")
    (cgroup / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    sample = SpareCpu(tmp_path).sample()
    assert (sample.idle, sample.used, sample.quota) == (4.0, 2.5, 1.5)
    (cgroup / "cpu.max").write_text("max 100000\n")  # no quota: the machine's idle time alone
    assert SpareCpu(tmp_path).sample().quota is None


def _refused_uri() -> str:
    with socket.socket() as s:  # a port nothing listens on: every request is refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _tried(run: object, within: float) -> bool:
    """Whether the sender made a request (to a refused port: its one warning) within the time."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if any("did not take" in w for w in run.take_warnings()):  # type: ignore[attr-defined]
            return True
        time.sleep(0.05)
    return False


def test_a_sender_holds_everything_while_the_cpu_is_busy_until_the_job_ends_or_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("mlflow")
    from jupyter_ktrain.tracking import mlflow_run
    from jupyter_ktrain.tracking.mlflow_run import MlflowRun

    def record() -> RunRecord:
        return RunRecord.from_json({"started": time.time(), "mlflow": {
            "uri": _refused_uri(), "experiment": "x", "sent": {}}})  # fmt: skip

    points = Reading(points=[Point("loss", float(i), i, 0) for i in range(2000)])
    busy = MlflowRun("local", "busy", record(), interval=0.05, retry_s=0.05, spare=lambda: 0.1)
    idle = MlflowRun("local", "idle", record(), interval=0.05, retry_s=0.05, spare=lambda: 1.0)
    try:
        busy.add(points)
        idle.add(points)
        assert _tried(idle, 20)  # spare CPU: it sends at once
        assert not _tried(busy, 1.5)  # no spare CPU: not even the run is made
        assert busy.pending == 2000
        busy.end("Succeeded", time.time())  # the job ended: it cannot be slowed any more
        assert _tried(busy, 20)
        assert busy.held_s >= 1.5
    finally:
        busy.close()
        idle.close()
    monkeypatch.setattr(mlflow_run, "MAX_HOLD_S", 0.5)
    long = MlflowRun("local", "long", record(), interval=0.05, retry_s=0.05, spare=lambda: 0.0)
    try:
        long.add(points)
        assert _tried(long, 20)  # held for too long: sent while still busy
    finally:
        long.close()
