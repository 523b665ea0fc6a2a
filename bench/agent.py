"""Step-time overhead of the agent's GPU sampling on a CPU torch training loop.

Each run: the agent (``jupyter_ktrain.agent.runner.main``, in its own process) starts a
child that trains a small MLP with torch on CPU and records every step's duration. Runs
alternate sampling off / on (NVML through a fake seam at 1 Hz, since this machine may have
no GPU; pass ``--real`` to use NVML). The overhead is the relative difference of the median
step time, taken as the median over run pairs; on a shared machine its run-to-run noise
(a few %) is larger than the effect, so the sampler's own CPU cost is also measured
directly: CPU time of one tick (read every GPU, format, write) at 1 Hz, as a share of one
core. Last line: one JSON object.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TRAIN = r"""
import json, sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
times = []
for step in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
json.dump(times, open(sys.argv[1], "w"))
"""


class FakeNvml:
    """Four GPUs answering like NVML does (the real call costs 10-100 µs; the point here is
    the agent thread's cost around it)."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int:
        return 4

    def handle(self, index: int) -> Any:
        return index

    def uuid(self, handle: Any) -> str:
        return f"GPU-0000000{handle}-1111-2222-3333-444455556666"

    def utilization(self, handle: Any) -> float:
        return 97.0

    def memory(self, handle: Any) -> tuple[int, int]:
        return (40 << 30, 80 << 30)

    def power_watts(self, handle: Any) -> float:
        return 612.5

    def temperature_c(self, handle: Any) -> float:
        return 64.0


def as_agent(argv: list[str]) -> int:
    """Child mode: run the real runner with the fake (or real) NVML; print agent CPU."""
    from jupyter_ktrain.agent import runner

    real = argv[0] == "--real"
    argv = argv[1:] if real else argv
    nvml = None if real else FakeNvml()
    code = runner.main(argv, nvml=nvml)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"AGENT_CPU {usage.ru_utime + usage.ru_stime}", flush=True)
    return code


def one_run(sampling: str, steps: int, real: bool) -> tuple[float, float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        cmd = [sys.executable, __file__, "--as-agent"]
        cmd += ["--real"] if real else []
        cmd += ["--gpu-sampling", sampling, "--interval", "1", "--"]
        cmd += [sys.executable, "-c", TRAIN, str(out), str(steps)]
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        wall = time.monotonic() - t0
        times = json.loads(out.read_text())
    agent_cpu = float(done.stdout.split("AGENT_CPU ")[1].split()[0])
    records = done.stdout.count('"type":"gpu"')
    warm = times[len(times) // 10 :]  # skip warm-up steps
    return statistics.median(warm), agent_cpu / wall, records


def tick_cost_us(real: bool) -> float:
    """CPU microseconds of one sampler tick (read 4 GPUs, format, write 4 lines)."""
    from jupyter_ktrain.agent.sampler import Sampler

    fd = os.open(os.devnull, os.O_WRONLY)
    sampler = Sampler(None if real else FakeNvml(), env={}, emit=lambda t: os.write(fd, t.encode()))
    if not sampler.open():
        return float("nan")
    t0 = time.thread_time()
    for _ in range(2000):
        sampler.tick()
    cost = (time.thread_time() - t0) / 2000 * 1e6
    os.close(fd)
    return cost


def main() -> None:
    real = "--real" in sys.argv
    steps, pairs = 3000, 6
    overheads, cpu_on, cpu_off, records = [], [], [], 0
    for _ in range(pairs):
        off, c_off, _ = one_run("off", steps, real)
        on, c_on, n = one_run("on", steps, real)
        overheads.append((on - off) / off * 100)
        cpu_on.append(c_on)
        cpu_off.append(c_off)
        records += n
        print(f"off {off * 1e3:.3f} ms/step   on {on * 1e3:.3f} ms/step   gpu records {n}")
    sampler_cpu = (statistics.median(cpu_on) - statistics.median(cpu_off)) * 100
    tick_us = tick_cost_us(real)
    result = {
        "nvml": "real" if real else "fake seam, 4 GPUs",
        "gpu_records": records,
        "step_time_overhead_pct": round(statistics.median(overheads), 3),
        "step_time_overhead_pct_goal": "<0.5",
        "overhead_spread_pct": [round(min(overheads), 3), round(max(overheads), 3)],
        "agent_cpu_pct_on_minus_off": round(sampler_cpu, 4),
        "sampler_tick_us": round(tick_us, 1),
        "sampler_cpu_pct_at_1hz": round(tick_us / 1e4, 5),
        "sampler_cpu_pct_at_1hz_goal": "<0.5",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--as-agent":
        sys.exit(as_agent(sys.argv[2:]))
    main()
