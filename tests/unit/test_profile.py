"""``%ktrain profile``'s pure parts and the rank's side in this process: the figures from a
profiler's events (self times, collectives, shares that add up to the window), the table's
text, the step boundaries, a real ``torch.profiler`` armed on them, and the GPU check's
verdict on a GPU job's table."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.pod.profiling import profiler, steps
from jupyter_ktrain.pod.profiling.summary import is_collective, summarize, union_s
from jupyter_ktrain.pod.protocol import Profile
from jupyter_ktrain.runner.profile import no_steps_text, profile_text
from tests.unit.test_gpu_check import _gpu_check


def _x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def test_collectives_are_named_so_and_aten_ops_never() -> None:
    for name in ("c10d::allreduce_", "gloo:all_reduce", "nccl:all_gather", "c10d::broadcast_",
                 "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "gloo:barrier"):  # fmt: skip
        assert is_collective(name), name
    for name in ("aten::broadcast_tensors", "aten::mm", "ampere_sgemm_128x64_nn", "aten::add_"):
        assert not is_collective(name), name


def test_union_counts_overlaps_once() -> None:
    assert union_s([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert union_s([]) == 0


def test_cpu_figures_self_times_and_shares_that_add_up_to_the_window() -> None:
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 1000},
            _x("aten::linear", 100, 300),  # calls addmm: self 100
            _x("aten::addmm", 150, 200),
            _x("aten::mm", 500, 100),
            _x("gloo:all_reduce", 550, 250, cat="user_annotation", tid=2),  # 100 hidden
            _x("c10d::allreduce_", 650, 10),  # the launch, a collective on the main thread
            _x("DistributedDataParallel.forward", 90, 400, cat="user_annotation"),  # not an op
            {"ph": "i", "name": "Iteration Start", "ts": 0},
        ]
    }
    s = summarize(trace)
    assert s.device == "cpu"
    assert s.window == pytest.approx(1e-3)
    assert s.compute == pytest.approx(400e-6)  # 100-400 and 500-600
    assert s.communication == pytest.approx(200e-6)  # 600-800: the all-reduce alone
    assert s.waiting == pytest.approx(400e-6)
    assert s.compute + s.communication + s.waiting == pytest.approx(s.window)
    ops = {name: (calls, seconds) for name, calls, seconds in s.ops}
    assert ops["gloo:all_reduce"] == (1, pytest.approx(250e-6))
    assert ops["aten::addmm"] == (1, pytest.approx(200e-6))
    assert ops["aten::linear"] == (1, pytest.approx(100e-6))  # its own time only
    assert "DistributedDataParallel.forward" not in ops
    assert [name for name, _, _ in s.ops][:2] == ["gloo:all_reduce", "aten::addmm"]


def test_gpu_figures_are_the_kernels_by_device_time() -> None:
    trace = {
        "traceEvents": [
            _x("aten::mm", 0, 50),  # CPU ops: not the table on a GPU
            _x("ampere_sgemm_128x64_nn", 100, 300, cat="kernel", tid=7),
            _x("ampere_sgemm_128x64_nn", 500, 100, cat="kernel", tid=7),
            _x("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 550, 250, cat="kernel", tid=8),
            _x("Memcpy HtoD (Pageable -> Device)", 900, 50, cat="gpu_memcpy", tid=7),
        ]
    }
    s = summarize(trace)
    assert s.device == "cuda"
    assert s.window == pytest.approx(950e-6)  # no Trace event: the events' span
    assert s.ops == (
        ("ampere_sgemm_128x64_nn", 2, pytest.approx(400e-6)),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1, pytest.approx(250e-6)),
    )
    assert s.compute == pytest.approx(450e-6)
    assert s.communication == pytest.approx(200e-6)
    assert s.waiting == pytest.approx(300e-6)


def test_a_trace_without_events_is_an_empty_window() -> None:
    s = summarize({})
    assert (s.window, s.compute, s.communication, s.waiting, s.ops) == (0, 0, 0, 0, ())


def _profile(rank: int, **more: Any) -> Profile:
    fields: dict[str, Any] = dict(
        pid=10 + rank, first=5, last=8, device="cpu", window=0.2, compute=0.1,
        communication=0.06, waiting=0.04,
        ops=(("aten::mm", 3, 0.05), ("gloo:all_reduce", 3, 0.04), ("x" * 70, 1, 0.001)),
    )  # fmt: skip
    return Profile(rank, **{**fields, **more})


def test_the_table_one_row_a_rank_then_each_ranks_top_operators(tmp_path: Path) -> None:
    got = [
        ("", _profile(0)),
        ("", _profile(1, note="trace not kept: 9.1 MiB gzipped, over 8 MiB")),
        ("", Profile(2, 12, why="it marked no step (none in 10 s)", no_steps=True)),
        ("", Profile(3, 13, why="3 steps did not end within 300 s (it was at step 4)")),
    ]
    text = profile_text("job", 3, got, tmp_path, [0])
    lines = text.splitlines()
    assert lines[0] == "Profile of 'job': 2 ranks, 3 steps each (CPU time):"
    assert lines[1].split() == ["RANK", "STEPS", "WINDOW", "COMPUTE", "COMMUNICATION", "WAITING"]
    assert lines[2].split() == ["rank", "0", "6-8", "200.0", "ms", "50%", "30%", "20%"]
    assert lines[4] == (
        "  rank 2: marks no steps (call `ktrain.report(step=...)` each step on this rank too)"
    )
    assert lines[5] == "  rank 3: 3 steps did not end within 300 s (it was at step 4)"
    rank0 = text.split("\nrank 0: top CPU operators, self time\n")[1].split("\n\n")[0]
    assert rank0.splitlines()[1].split() == ["aten::mm", "3", "50.0", "ms", "25%"]
    assert rank0.splitlines()[2].split() == ["gloo:all_reduce", "3", "40.0", "ms", "20%"]
    assert "x" * 53 + "..." in rank0
    assert "  (trace not kept: 9.1 MiB gzipped, over 8 MiB)" in text
    assert "\nrank 2: top" not in text
    assert f"Chrome traces (rank0.trace.json.gz) kept in {tmp_path}: open one in" in text
    cuda = profile_text("job", 1, [("job-worker-0", _profile(0, device="cuda", first=7))], None)
    assert "(CUDA time)" in cuda
    assert "rank 0 (pod job-worker-0): top CUDA kernels, by device time" in cuda
    assert cuda.splitlines()[2].split()[:2] == ["rank", "0"]
    assert cuda.splitlines()[2].split()[2] == "8"  # one step: its number
    assert "Chrome traces" not in cuda


def test_the_no_steps_line_says_how_to_mark_them() -> None:
    line = no_steps_text("job")
    assert "\n" not in line
    assert "call `ktrain.report(step=...)` once per step" in line
    assert line.endswith("then run `%ktrain profile job` again.")


def test_a_step_boundary_is_a_new_step_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steps, "_last", None)
    monkeypatch.setattr(steps, "_hooks", [])
    seen: list[int] = []
    steps.on_boundary(lambda s: seen.append(s) is None and len(seen) == 2)
    for s in (1, 1, 2, 2, 3, 4):
        steps.mark(s)
    assert seen == [1, 2]  # the hook said done at its second boundary
    assert steps.last() == 4

    def broken(step: int) -> bool:
        raise RuntimeError("no")

    steps.on_boundary(broken)
    steps.mark(5)  # never raises into training; the broken hook is dropped
    assert steps._hooks == []


def test_a_real_profiler_armed_on_the_steps_of_this_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    monkeypatch.setattr(steps, "_last", None)
    monkeypatch.setattr(steps, "_hooks", [])
    no_steps = profiler.take(0, 3, wait_s=0.1)
    assert no_steps.no_steps
    assert no_steps.why == "it marked no step (none in 0 s)"
    stop = threading.Event()
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def train() -> None:
        step = 0
        while not stop.is_set():
            torch.mm(a, b)
            step += 1
            steps.mark(step)
            stop.wait(0.005)

    loop = threading.Thread(target=train)
    loop.start()
    try:
        got = profiler.take(0, 3, wait_s=5, timeout_s=60)
        monkeypatch.setattr(profiler, "MAX_TRACE_BYTES", 64)
        bounded = profiler.take(0, 1, wait_s=5, timeout_s=60)
    finally:
        stop.set()
        loop.join()
    assert bounded.trace == ""  # over the bound: the figures come, the trace does not
    assert bounded.note.startswith("trace not kept: ")
    assert bounded.note.endswith(" MiB gzipped, over 0 MiB (profile fewer steps)")
    assert "aten::mm" in [name for name, _, _ in bounded.ops]
    assert got.why == ""
    assert got.first is not None
    assert got.last == got.first + 3
    assert got.device == "cpu"
    assert got.window > 0
    assert "aten::mm" in [name for name, _, _ in got.ops]
    trace = json.loads(gzip.decompress(base64.b64decode(got.trace)))
    calls = [e for e in trace["traceEvents"] if e.get("name") == "aten::mm"]
    assert 3 <= len(calls) <= 4  # the three steps' (the start may fall just before one)
    stalled = profiler.take(0, 3, wait_s=1, timeout_s=0.3)  # no step comes: it disarms
    assert stalled.why == f"3 steps did not end within 0 s (it was at step {steps.last()})"
    steps.mark(-1)  # the disarmed profile leaves at the next boundary, starting nothing
    assert steps._hooks == []


def test_the_gpu_checks_verdict_on_a_gpu_jobs_table() -> None:
    module = _gpu_check()
    compile(module.CELLS, "CELLS", "exec")  # its notebook cell, with the profiled loop
    assert "def gpu_steps(steps, pause):" in module.CELLS
    judge = module.judge_profile
    gpu = profile_text(
        "gc-profile", 3,
        [("", _profile(0, device="cuda", ops=(("ampere_sgemm_128x64_nn", 6, 0.03),
                                              ("ncclDevKernel_AllReduce_Sum_f32", 3, 0.01))))],
        None,
    )  # fmt: skip
    verdict = judge(gpu)
    assert verdict == {
        "ok": True,
        "cuda_time": True,
        "compute_percent": 50,
        "kernels": ["ampere_sgemm_128x64_nn", "ncclDevKernel_AllReduce_Sum_f32"],
    }
    cpu = profile_text("gc-profile", 3, [("", _profile(0))], None)
    assert judge(cpu)["ok"] is False  # CPU time: the job never reached the GPU
    assert judge("")["ok"] is False


def test_asked_on_the_ranks_socket_and_an_older_rank_says_it_takes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    import torch

    from jupyter_ktrain.pod import stacks as pod_stacks
    from jupyter_ktrain.pod.protocol import Stack

    monkeypatch.setattr(steps, "_last", None)
    monkeypatch.setattr(steps, "_hooks", [])
    folder = tmp_path / "s"
    server = pod_stacks.serve(0, __file__, {pod_stacks.STACKS_DIR_ENV: str(folder)})
    assert server is not None
    older = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # a rank from before `profile`:
    older.bind(str(folder / "rank1.sock"))  # it answers its stack at once, whatever is asked
    older.listen(1)

    def answer_stack() -> None:
        conn, _ = older.accept()
        with conn:
            conn.sendall(Stack(1, 99).format().encode() + b"\n")

    threading.Thread(target=answer_stack, daemon=True).start()
    stop = threading.Event()

    def train() -> None:
        step = 0
        while not stop.is_set():
            torch.mm(torch.ones(8, 8), torch.ones(8, 8))
            step += 1
            steps.mark(step)
            stop.wait(0.005)

    loop = threading.Thread(target=train)
    loop.start()
    try:
        got = pod_stacks.ask_profile(str(folder), 2, timeout=60)
    finally:
        stop.set()
        loop.join()
        server.close()
        older.close()
    assert [p.rank for p in got] == [0, 1]
    assert got[0].why == ""
    assert got[0].last == got[0].first + 2  # type: ignore[operator]
    assert "aten::mm" in [name for name, _, _ in got[0].ops]
    assert got[1].why == "its jupyter-ktrain is older: it shows its stack but takes no profile"
