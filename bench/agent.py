"""Step-time overhead of the agent's GPU sampling on a training loop.

Each run: the agent (``jupyter_ktrain.pod.agent.runner.main``, in its own process) starts a
child that trains and records every step's duration. Runs come in ABBA pairs (sampling
off/on, then on/off) so a drift of the machine does not favour one side. The overhead is
the relative difference of the median step time, taken as the median over run pairs.

- default: a small MLP on CPU, NVML through a fake seam (this machine may have no GPU);
- ``--real``: the real NVML, and, when torch sees a CUDA GPU, a bf16 MLP training step on
  that GPU (synchronised each step, so a step's time is the GPU's), which is the case the
  sampler must not slow down. Without a GPU ``--real`` says so and falls back to the CPU loop.

On a shared machine the run-to-run noise (a few %) is larger than the effect, so the
sampler's own CPU cost is also measured directly: CPU time of one tick (read every GPU,
format, write) at 1 Hz, as a share of one core. ``--pairs N --steps N`` trade precision for
time (``scripts/gpu-check`` uses fewer). Last line: one JSON object.
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
sys.path.insert(0, str(ROOT))  # this checkout's package, installed or not

from jupyter_ktrain.pod.protocol import GPU, parse_line, record_type  # noqa: E402

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
json.dump({"times": times, "device": "cpu"}, open(sys.argv[1], "w"))
"""

# ~10-15 ms per step on an H100: four 4096-wide bf16 layers, forward + backward + SGD
TRAIN_GPU = r"""
import json, sys, time, torch
dev = torch.device("cuda")
torch.manual_seed(0)
width, batch = 4096, 8192
layers = [torch.nn.Linear(width, width) for _ in range(4)]
model = torch.nn.Sequential(*layers).to(device=dev, dtype=torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=dev, dtype=torch.bfloat16)
times = []
for step in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
json.dump({"times": times, "device": torch.cuda.get_device_name(0)}, open(sys.argv[1], "w"))
"""


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (asked in a child: this process stays torch-free)."""
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


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
    from jupyter_ktrain.pod.agent import runner

    real = argv[0] == "--real"
    argv = argv[1:] if real else argv
    nvml = None if real else FakeNvml()
    code = runner.main(argv, nvml=nvml)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"AGENT_CPU {usage.ru_utime + usage.ru_stime}", flush=True)
    return code


def one_run(sampling: str, steps: int, real: bool, gpu: bool) -> tuple[float, float, int, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        cmd = [sys.executable, __file__, "--as-agent"]
        cmd += ["--real"] if real else []
        cmd += ["--gpu-sampling", sampling, "--interval", "1", "--"]
        cmd += [sys.executable, "-c", TRAIN_GPU if gpu else TRAIN, str(out), str(steps)]
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
        wall = time.monotonic() - t0
        result = json.loads(out.read_text())
    times = result["times"]
    agent_cpu = float(done.stdout.split("AGENT_CPU ")[1].split()[0])
    records = sum(record_type(parse_line(line).record) == GPU for line in done.stdout.splitlines())
    warm = times[len(times) // 10 :]  # skip warm-up steps
    return statistics.median(warm), agent_cpu / wall, records, str(result["device"])


def tick_cost_us(real: bool) -> float:
    """CPU microseconds of one sampler tick (read 4 GPUs, format, write 4 lines)."""
    from jupyter_ktrain.pod.agent.sampler import Sampler

    fd = os.open(os.devnull, os.O_WRONLY)
    sampler = Sampler(None if real else FakeNvml(), env={}, emit=lambda t: os.write(fd, t.encode()))
    if not sampler.open():
        os.close(fd)
        return float("nan")
    t0 = time.thread_time()
    for _ in range(2000):
        sampler.tick()
    cost = (time.thread_time() - t0) / 2000 * 1e6
    os.close(fd)
    return cost


def _arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main() -> None:
    real = "--real" in sys.argv
    gpu = real and cuda_available()
    if real and not gpu:
        print("--real: torch sees no CUDA GPU here; timing the CPU loop instead", flush=True)
    steps = _arg("--steps", 800 if gpu else 3000)
    pairs = _arg("--pairs", 6)
    overheads, cpu_on, cpu_off, records, device = [], [], [], 0, ""
    step_s: list[float] = []
    for i in range(pairs):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")  # ABBA
        runs = {mode: one_run(mode, steps, real, gpu) for mode in order}
        (off, c_off, _, device), (on, c_on, n, _) = runs["off"], runs["on"]
        overheads.append((on - off) / off * 100)
        step_s += [off, on]
        cpu_on.append(c_on)
        cpu_off.append(c_off)
        records += n
        print(f"off {off * 1e3:.3f} ms/step   on {on * 1e3:.3f} ms/step   gpu records {n}")
    sampler_cpu = (statistics.median(cpu_on) - statistics.median(cpu_off)) * 100
    tick_us = tick_cost_us(real)
    result = {
        "nvml": "real" if real else "fake seam, 4 GPUs",
        "training": f"bf16 MLP on {device}" if gpu else "MLP on CPU (1 thread)",
        "pairs": pairs,
        "order": "ABBA",
        "step_ms_median": round(statistics.median(step_s) * 1e3, 3),
        "gpu_records": records,
        "step_time_overhead_pct": round(statistics.median(overheads), 3),
        "step_time_overhead_pct_goal": "<0.5",
        "overhead_spread_pct": [round(min(overheads), 3), round(max(overheads), 3)],
        "agent_cpu_pct_on_minus_off": round(sampler_cpu, 4),
        "sampler_tick_us": round(tick_us, 1) if tick_us == tick_us else None,  # NaN: no NVML
        "sampler_cpu_pct_at_1hz": round(tick_us / 1e4, 5) if tick_us == tick_us else None,
        "sampler_cpu_pct_at_1hz_goal": "<0.5",
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--as-agent":
        sys.exit(as_agent(sys.argv[2:]))
    main()
