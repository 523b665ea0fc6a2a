"""The GPU sampler against a fake NVML seam: UUID selection, records, failure isolation;
and the runner that hosts it (real child processes, exit codes, NCCL debug env)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from jupyter_ktrain.pod.agent import runner
from jupyter_ktrain.pod.agent.sampler import GpuInfo, Sampler, select_gpus
from jupyter_ktrain.pod.protocol import parse_line

UUIDS = [
    "GPU-1a2b3c4d-0000-1111-2222-333344445555",
    "GPU-9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff",
    "GPU-55aa55aa-1234-5678-9abc-def012345678",
    "GPU-00ff00ff-8765-4321-0fed-cba987654321",
]


class FakeNvml:
    """Faithful to NVML's shape: handles by index, UUID strings, bytes for memory, mW power
    converted by the seam; ``fail`` makes chosen calls raise like pynvml's NVMLError."""

    def __init__(self, uuids: list[str] = UUIDS, *, init_error: Exception | None = None) -> None:
        self.uuids = uuids
        self.init_error = init_error
        self.fail: set[str] = set()
        self.util = [97.0, 3.0, 50.0, 0.0]
        self.calls = 0
        self.shut = False

    def init(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def shutdown(self) -> None:
        self.shut = True

    def device_count(self) -> int:
        return len(self.uuids)

    def handle(self, index: int) -> Any:
        return ("h", index)

    def _check(self, what: str) -> None:
        self.calls += 1
        if what in self.fail:
            raise RuntimeError(f"NVML_ERROR_{what.upper()}")

    def uuid(self, handle: Any) -> str:
        return self.uuids[handle[1]]

    def utilization(self, handle: Any) -> float:
        self._check("util")
        return self.util[handle[1]]

    def memory(self, handle: Any) -> tuple[int, int]:
        self._check("memory")
        return (1024 * 1024 * 1024 * (handle[1] + 1), 80 * 1024 * 1024 * 1024)

    def power_watts(self, handle: Any) -> float:
        self._check("power")
        return 300.25 + handle[1]

    def temperature_c(self, handle: Any) -> float:
        self._check("temp")
        return 60.0 + handle[1]


GPUS = [GpuInfo(i, u) for i, u in enumerate(UUIDS)]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, [0, 1, 2, 3]),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, [0, 1, 2, 3]),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, []),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, []),
        ({"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[2]},{UUIDS[0]}"}, [2, 0]),
        ({"NVIDIA_VISIBLE_DEVICES": "1,3"}, [1, 3]),  # host indices, NVML sees all four
        ({"CUDA_VISIBLE_DEVICES": "3,1"}, [3, 1]),
        ({"CUDA_VISIBLE_DEVICES": UUIDS[1]}, [1]),
        ({"CUDA_VISIBLE_DEVICES": "GPU-55aa55aa"}, [2]),  # CUDA accepts a unique prefix
        ({"CUDA_VISIBLE_DEVICES": "9f8e7d6c-aaaa"}, [1]),  # and the UUID without "GPU-"
        ({"CUDA_VISIBLE_DEVICES": "2,-1,0"}, [2]),  # CUDA stops at an invalid index
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"NVIDIA_VISIBLE_DEVICES": f"{UUIDS[1]},{UUIDS[3]}", "CUDA_VISIBLE_DEVICES": "1"}, [3]),
        ({"CUDA_VISIBLE_DEVICES": "GPU-deadbeef"}, []),
    ],
)
def test_select_gpus_by_uuid_and_index(env: dict[str, str], expected: list[int]) -> None:
    assert [g.nvml_index for g in select_gpus(GPUS, env)] == expected


def test_container_renumbered_gpus_are_all_taken() -> None:
    # The runtime gave host GPUs 5 and 7; inside, NVML shows just two GPUs numbered 0, 1.
    inside = [GpuInfo(0, UUIDS[0]), GpuInfo(1, UUIDS[1])]
    assert select_gpus(inside, {"NVIDIA_VISIBLE_DEVICES": "5,7"}) == inside


def _sampler(nvml: FakeNvml, env: dict[str, str], lines: list[str]) -> Sampler:
    return Sampler(nvml, env=env, node=1, emit=lines.append, clock=lambda: 1763700000.0)


def test_records_only_for_assigned_gpus() -> None:
    lines: list[str] = []
    s = _sampler(FakeNvml(), {"CUDA_VISIBLE_DEVICES": f"{UUIDS[3]},{UUIDS[1]}"}, lines)
    assert s.open()
    assert s.tick()
    assert "GPU sampling on: 2 GPU(s)" in lines[0]
    recs = [parse_line("[agent]: " + line).record for line in lines[1:]]
    assert recs == [
        {"type": "gpu", "node": 1, "gpu": 0, "uuid": UUIDS[3], "t": 1763700000.0, "util": 0.0,
         "power": 303.2, "temp": 63.0, "mem_used": 4096.0, "mem_total": 81920.0},
        {"type": "gpu", "node": 1, "gpu": 1, "uuid": UUIDS[1], "t": 1763700000.0, "util": 3.0,
         "power": 301.2, "temp": 61.0, "mem_used": 2048.0, "mem_total": 81920.0},
    ]  # fmt: skip


def test_unsupported_fields_are_left_out() -> None:
    lines: list[str] = []
    nvml = FakeNvml()
    nvml.fail = {"power", "temp"}  # e.g. a MIG slice
    s = _sampler(nvml, {"CUDA_VISIBLE_DEVICES": "0"}, lines)
    assert s.open()
    assert s.tick()
    rec = json.loads(lines[-1].split(" ", 1)[1])
    assert "power" not in rec
    assert "temp" not in rec
    assert rec["util"] == 97.0


def test_no_nvml_is_one_info_line_and_off() -> None:
    lines: list[str] = []
    s = _sampler(FakeNvml(init_error=OSError("libnvidia-ml.so.1 not found")), {}, lines)
    assert not s.start()
    assert lines == ["GPU sampling off: NVML not available (OSError: libnvidia-ml.so.1 not found)"]
    lines.clear()
    s = _sampler(FakeNvml(), {"NVIDIA_VISIBLE_DEVICES": "none"}, lines)
    assert not s.start()
    assert lines == ["GPU sampling off: no GPU assigned (NVML sees 4)"]


def test_failures_warn_once_then_stop_without_raising() -> None:
    lines: list[str] = []
    nvml = FakeNvml()
    s = Sampler(nvml, env={}, emit=lines.append, max_failures=3)
    assert s.open()
    nvml.fail = {"util"}
    assert s.tick()
    assert s.tick()
    assert not s.tick()
    warnings = [x for x in lines if x.startswith("warning")]
    assert warnings == ["warning: GPU sample failed (RuntimeError: NVML_ERROR_UTIL)"]
    assert lines[-1] == "GPU sampling stopped: 3 failed samples in a row"
    nvml.fail = set()
    assert s.tick()  # a success resets the count
    assert s.failures == 0


def test_thread_samples_at_the_interval_and_stops() -> None:
    lines: list[str] = []
    nvml = FakeNvml()
    s = Sampler(nvml, env={"CUDA_VISIBLE_DEVICES": "0"}, emit=lines.append, interval=0.05)
    assert s.start()
    time.sleep(0.4)
    s.stop()
    n = s.samples
    assert 4 <= n <= 10
    time.sleep(0.15)
    assert s.samples == n
    assert nvml.shut


def test_an_emit_that_raises_never_escapes_the_thread() -> None:
    calls: list[str] = []

    def emit(text: str) -> None:
        calls.append(text)
        if len(calls) > 1:
            raise OSError("stdout closed")

    s = Sampler(FakeNvml(), env={}, emit=emit, interval=0.01, max_failures=5)
    assert s.start()
    assert s._thread is not None
    s._thread.join(2)
    assert not s._thread.is_alive()  # stopped by itself after max_failures, nothing raised
    assert s.failures >= 5


# -- runner -----------------------------------------------------------------------------


def test_child_env_sets_nccl_debug_only_for_rdma() -> None:
    assert "NCCL_DEBUG" not in runner.child_env({"KTRAIN_RDMA": "tcp"})
    assert "NCCL_DEBUG" not in runner.child_env({})
    env = runner.child_env({"KTRAIN_RDMA": "roce"})
    assert (env["NCCL_DEBUG"], env["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT,NET")
    assert runner.child_env({"KTRAIN_RDMA": "ib", "NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu-sampling", "maybe", "--", "true"], "invalid choice: 'maybe'"),
        (["--interval", "0", "--", "true"], "--interval must be a positive"),
        (["--gpu-sampling", "on"], "missing the node command"),
    ],
)
def test_bad_options_say_what_to_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert runner.main(argv) == 2
    assert message in capsys.readouterr().err


# -- NVML over nvidia-ml-py: memory v2 -------------------------------------------------------

H100_TOTAL = 81559 * 1024 * 1024  # NVIDIA H100 80GB HBM3 as NVML reports it
H100_RESERVED = 480 * 1024 * 1024  # what the driver keeps for itself (issue 11)


class FakePynvml:
    """The ``pynvml`` calls :class:`PynvmlNvml` makes, answering with an idle H100's values
    from the issue-11 run: the v1 memory call counts the driver's reserve as used (~480 MiB),
    v2 reports it apart (nvidia-smi showed 0 MiB). ``has_v2=False`` is a driver without
    ``nvmlDeviceGetMemoryInfo_v2`` (pynvml raises NVMLError FunctionNotFound)."""

    nvmlMemory_v2 = 0x02000028

    class NVMLError(Exception):
        pass

    def __init__(self, has_v2: bool = True) -> None:
        self.has_v2 = has_v2
        self.calls: list[object] = []

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        return ("h", index)

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> Any:
        from types import SimpleNamespace

        self.calls.append(version)
        if version is None:
            return SimpleNamespace(total=H100_TOTAL, free=H100_TOTAL - H100_RESERVED,
                                   used=H100_RESERVED)  # fmt: skip
        if not self.has_v2:
            raise self.NVMLError("Function Not Found")
        return SimpleNamespace(version=version, total=H100_TOTAL, reserved=H100_RESERVED,
                               free=H100_TOTAL - H100_RESERVED, used=0)  # fmt: skip


@pytest.mark.parametrize(("has_v2", "used_mib"), [(True, 0.0), (False, 480.0)])
def test_memory_used_is_read_with_nvml_v2_where_the_driver_has_it(
    has_v2: bool, used_mib: float
) -> None:
    from jupyter_ktrain.pod.agent.sampler import PynvmlNvml

    module = FakePynvml(has_v2=has_v2)
    nvml = PynvmlNvml(module)
    nvml.init()
    handle = nvml.handle(0)
    for _ in range(2):
        used, total = nvml.memory(handle)
        assert (round(used / 2**20, 1), round(total / 2**20)) == (used_mib, 81559)
    # v2 is tried once: a driver without it is not asked again every second
    assert module.calls == ([0x02000028] * 2 if has_v2 else [0x02000028, None, None])


def test_local_node_gpus_are_picked_by_uuid_not_by_visible_devices() -> None:
    # a kernel in a container whose runtime listed the GPUs in another order than NVML's: the
    # indices the local backend gives CUDA would pick the wrong GPUs through that list
    env = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(reversed(UUIDS)),
        "CUDA_VISIBLE_DEVICES": "2,3",
        "KTRAIN_GPU_UUIDS": f"{UUIDS[2]},{UUIDS[3]}",
    }
    assert [g.nvml_index for g in select_gpus(GPUS, {**env, "KTRAIN_GPU_UUIDS": ""})] == []
    assert [g.nvml_index for g in select_gpus(GPUS, env)] == [2, 3]
    lines: list[str] = []
    s = _sampler(FakeNvml(), env, lines)
    assert s.open()
    assert [u for _, _, u in s.gpus] == [UUIDS[2], UUIDS[3]]
