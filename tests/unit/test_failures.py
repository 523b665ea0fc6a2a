"""Failure classes on real failing ranks' last lines (sources in tests/data/failures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.failures import (
    TorchrunReport,
    WorkerExit,
    classify,
    signal_failure,
    signal_text,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "failures"


def _lines(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


@pytest.mark.parametrize(
    ("name", "kind", "says"),
    [
        ("duplicate_gpu_h100.log", "NCCL error", ["ranks 0 and 1 both use one GPU", "set_device"]),
        ("duplicate_gpu_torch.log", "NCCL error", ["--procs-per-node <= --gpus-per-node"]),
        ("nccl_system_error.log", "NCCL error", ["nvmlDeviceGetHandleByPciBusId() failed"]),
        ("device_assert.log", "CUDA error", ["device-side assert triggered", "index out of range"]),
        ("device_assert_with_cause.log", "CUDA error", ["`probability tensor contains"]),
        ("cuda_oom.log", "OOM", ["out of memory", "batch size"]),
    ],
)
def test_real_failures_get_their_class_and_a_fix(name: str, kind: str, says: list[str]) -> None:
    failure = classify(_lines(name), exit_code=1)
    assert failure.kind == kind
    for text in says:
        assert text in failure.explanation
    # the one line the user reads names the class once, e.g. never "CUDA error: CUDA error: ..."
    assert str(failure).count(kind) == 1
    assert not failure.explanation.lower().startswith(kind.lower())


def test_a_timeout_is_still_a_timeout_and_unknown_output_is_plain_error() -> None:
    watchdog = "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation timeout"
    assert classify([watchdog]).kind == "NCCL timeout"
    plain = classify(["Traceback (most recent call last):", "ValueError: bad shape"], 1)
    assert (plain.kind, plain.explanation) == ("error", "exited with code 1.")


def test_torchruns_report_says_which_rank_a_signal_killed() -> None:
    """torchrun 2.13's own report of a 4-rank node whose rank 2 got ``kill -9``: its "root
    cause" is rank 1 (which lost rank 2 and exited 1 a moment later); the report is still the
    only place that names rank 2 and its signal."""
    report = TorchrunReport()
    found = [e for line in _lines("torchrun_rank_killed.log") if (e := report.feed(line))]
    assert found == [
        WorkerExit(rank=2, code=137, root=False),
        WorkerExit(rank=0, code=1, root=False),
        WorkerExit(rank=3, code=1, root=False),
        WorkerExit(rank=1, code=1, root=True),
    ]
    assert TorchrunReport().feed("[rank0]: rank      : 2 (local_rank: 2)") is None


def test_a_signal_is_named_and_explained() -> None:
    assert signal_text(137) == "signal 9 (SIGKILL)"
    assert signal_text(139) == "signal 11 (SIGSEGV)"
    assert signal_text(1) is None
    assert signal_text(None) is None
    kinds = {code: getattr(signal_failure(code), "kind", None) for code in (137, 134, 143, 1)}
    assert kinds == {137: "killed", 134: "crash", 143: "stopped", 1: None}
    killed = signal_failure(137)
    assert killed is not None
    assert "out-of-memory killer" in killed.explanation
