"""Failure classes on real failing ranks' last lines (sources in tests/data/failures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.monitor.failures import classify

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
