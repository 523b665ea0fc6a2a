"""ktrain.report(): one record line per call in a rank, nothing in the kernel, never raises."""

from __future__ import annotations

import importlib
import io
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from jupyter_ktrain.pod.protocol import format_rank_line, parse_line
from jupyter_ktrain.pod.report import report

# the module, even once the package exports the function under the same name
report_mod = importlib.import_module("jupyter_ktrain.pod.report")


@pytest.fixture
def rank(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setattr(report_mod, "_rank_cache", None)
    monkeypatch.setattr(report_mod, "_warned", set())
    monkeypatch.setattr(report_mod, "FLUSH_S", 0.0)  # each record written at once (see below)
    yield 3
    report_mod._rank_cache = None


def _records(out: str) -> list[dict[str, object]]:
    recs = []
    for line in out.splitlines():
        parsed = parse_line(format_rank_line(3, line))  # what the runtime's prefix makes of it
        assert parsed.record is not None, line
        recs.append(parsed.record)
    return recs


def test_in_a_rank_each_call_is_one_metric_record(
    rank: int, capsys: pytest.CaptureFixture[str]
) -> None:
    report(step=10, loss=0.52, samples_per_sec=1234)
    report(loss=0.5)
    recs = _records(capsys.readouterr().out)
    assert recs[0]["type"] == "metric"
    assert recs[0]["rank"] == rank
    assert (recs[0]["step"], recs[0]["loss"], recs[0]["samples_per_sec"]) == (10, 0.52, 1234.0)
    assert abs(float(recs[0]["t"]) - time.time()) < 5  # type: ignore[arg-type]
    assert "step" not in recs[1]


def test_bad_values_are_dropped_with_one_warning(
    rank: int, capsys: pytest.CaptureFixture[str]
) -> None:
    report(step=1, loss=float("nan"), acc=0.9, rank=7)  # type: ignore[arg-type]
    report(step=2, loss=float("inf"), acc="high")  # type: ignore[arg-type]
    report(step="x", acc=0.8)  # type: ignore[arg-type]
    captured = capsys.readouterr()
    recs = _records(captured.out)
    assert [r.get("loss") for r in recs] == [None, None, None]
    assert [r.get("acc") for r in recs] == [0.9, None, 0.8]
    assert recs[0]["rank"] == rank  # a metric named "rank" cannot spoof it
    errs = captured.err.splitlines()
    assert sum("loss=" in e for e in errs) == 1
    assert any("'rank' is a reserved name" in e for e in errs)
    assert any("acc='high'" in e for e in errs)
    assert any("step='x'" in e for e in errs)


def test_a_broken_stdout_never_raises(rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken(io.StringIO):
        def write(self, s: str) -> int:
            raise OSError("pipe closed")

    monkeypatch.setattr(sys, "stdout", Broken())
    report(step=1, loss=1.0)  # no exception


def test_outside_a_job_it_is_a_quick_no_op(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(report_mod, "_rank_cache", None)
    t0 = time.perf_counter()
    for i in range(10_000):
        report(step=i, loss=1.0)
    per_call = (time.perf_counter() - t0) / 10_000
    assert capsys.readouterr().out == ""
    assert per_call < 20e-6


def test_costs_microseconds_and_is_thread_safe(rank: int, monkeypatch: pytest.MonkeyPatch) -> None:
    sink = io.StringIO()
    monkeypatch.setattr(sys, "stdout", sink)
    n = 20_000
    t0 = time.perf_counter()
    for i in range(n):
        report(step=i, loss=0.1, samples_per_sec=100.0)
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 100e-6, per_call  # ~5 µs measured; generous for a shared machine

    sink.seek(0)
    sink.truncate()
    threads = [
        threading.Thread(target=lambda k=k: [report(step=i, w=float(k)) for i in range(500)])
        for k in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = _records(sink.getvalue())
    assert len(recs) == 4000
    assert {r["w"] for r in recs} == {float(k) for k in range(8)}


class _Writes(io.StringIO):
    """A stdout that counts its writes (each would be a system call into the rank's pipe)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, s: str) -> int:
        self.writes += 1
        return super().write(s)


def test_calls_are_held_and_written_together_in_order_without_a_write_per_call(
    rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training loop does not pay a write (and the wake-up of the rank's prefixing thread)
    per call: the records wait in the rank and go out together, every one, in order; a
    checkpoint's record goes at once, after them."""
    from jupyter_ktrain.pod.protocol import Checkpoint

    monkeypatch.setattr(report_mod, "FLUSH_S", 60.0)  # only size or an explicit write
    out = _Writes()
    monkeypatch.setattr(sys, "stdout", out)
    for i in range(100):
        report(step=i, total=100, loss=1.0 / (i + 1))
    assert out.writes < 5, out.writes  # 100 records, ~8 KB: none or one write, not 100
    report_mod.emit(Checkpoint(step=99, file="ckpt-99.pt"))
    recs = _records(out.getvalue())
    assert [r["step"] for r in recs] == [*range(100), 99]
    assert recs[-1]["type"] == "checkpoint"
    report(step=100, loss=0.5)
    report_mod.flush()  # the rank's end
    last = _records(out.getvalue())[-1]
    assert (last["type"], last["step"], last["loss"]) == ("metric", 100, 0.5)


def test_held_records_go_out_by_themselves_when_no_call_comes(
    rank: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_mod, "FLUSH_S", 0.05)
    out = _Writes()
    monkeypatch.setattr(sys, "stdout", out)
    report(step=1, loss=1.0)
    report(step=2, loss=0.5)  # held: no call comes after it
    deadline = time.monotonic() + 30
    while len(_records(out.getvalue())) < 2:
        assert time.monotonic() < deadline, out.getvalue()
        time.sleep(0.01)
    assert [r["step"] for r in _records(out.getvalue())] == [1, 2]


def test_total_makes_a_progress_record_and_listeners_see_each_record(
    rank: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, object]] = []
    monkeypatch.setattr(report_mod, "_listeners", [])
    report_mod.add_listener(seen.append)
    report(step=3, total=10)  # progress only: nothing to plot
    report(step=4, total=10, loss=0.5)
    report(step=5, total=0, loss=0.4)  # not a total: progress dropped, the metric kept
    report(total=10, loss=0.3)  # a total without a step says nothing of progress
    captured = capsys.readouterr()
    recs = _records(captured.out)
    assert [(r.get("step"), r.get("total"), r.get("loss")) for r in recs] == [
        (3, 10, None),
        (4, 10, 0.5),
        (5, None, 0.4),
        (None, None, 0.3),
    ]
    assert seen == recs
    assert captured.err.count("total=0 is not a positive integer") == 1


_TF_CONFIG = (
    '{"cluster": {"chief": ["tf-chief-0:2222"], "worker": ["tf-worker-0:2222", '
    '"tf-worker-1:2222"]}, "task": {"type": "worker", "index": 1}}'
)
_OMPI = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
         "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}  # fmt: skip


def test_outside_a_job_there_is_no_rank_and_no_record() -> None:
    from jupyter_ktrain.pod.ranks import global_rank, node_index

    assert global_rank({}) is None
    assert global_rank({"TF_CONFIG": "not json"}) is None
    evaluator = '{"cluster": {"worker": ["w:1"]}, "task": {"type": "evaluator", "index": 0}}'
    assert global_rank({"TF_CONFIG": evaluator}) is None
    assert node_index({}) == 0
    assert node_index({"TF_CONFIG": _TF_CONFIG}) == 2  # one process per TFJob replica
    assert node_index({"RANK": "7", "PET_NODE_RANK": "1"}) == 1  # torchrun's node, not its rank
    assert node_index({"OMPI_COMM_WORLD_RANK": "3", **_OMPI}) == 1


def test_a_ray_task_on_a_rayjob_pod_reports_as_the_driver() -> None:
    """A RayJob's pods set KTRAIN_RANK=0: the processes Ray starts there for the driver's tasks
    report as its rank 0; any launcher's own rank wins over it."""
    from jupyter_ktrain.pod.ranks import global_rank

    assert global_rank({"KTRAIN_RANK": "0"}) == 0
    assert global_rank({"KTRAIN_RANK": "0", "RANK": "3"}) == 3
