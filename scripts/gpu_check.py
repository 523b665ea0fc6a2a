#!/usr/bin/env python3
"""Every GPU acceptance check in one command (``scripts/gpu-check``, ``make gpu-check``);
prints one JSON line.

On a machine with an NVIDIA GPU and this project (torch with CUDA, nvidia-ml-py, IPython,
DeepSpeed for the ZeRO-3 check), within 10 minutes:

1. ``sampling``: the agent (real NVML) beside a bf16 matmul load on GPU 0: one record per
   second, the UUID of the GPU the load runs on, util/power/temperature/memory in range and
   rising with the load, the same samples on its Prometheus endpoint;
2. ``overhead``: the agent's step-time overhead on a GPU training loop (bench/agent.py --real,
   ABBA pairs, median; goal < 0.5 %);
3. ``nccl_1x1``: a 1 x 1 NCCL all-reduce through ``%%ktrain``, its result back in the kernel;
4. ``nccl_transport``: the transport parsed from that job's real NCCL_DEBUG=INFO log;
5. ``deepspeed_zero3_bf16``: a DeepSpeed ZeRO-3 bf16 job through ``%%ktrain``, losses back;
6. ``failures``: the classes of an OOM, a device-side assert and two ranks on one GPU;
7. ``stuck_nccl``: a rank stuck in an NCCL all-reduce named (the cell's warning, where it
   waits) within ``--hang-after`` plus seconds, long before NCCL's 10-minute watchdog;
8. ``profile``: ``%ktrain profile`` of a running GPU job: its table in CUDA time, with CUDA
   kernels (a GEMM, NCCL's) among the top rows and a share of compute.

Progress goes to stderr; the last stdout line is one JSON object with ``ok`` and each
check's figures. Exit 0 when every check passes, 1 when one fails, 2 when there is no GPU
(or no CUDA torch) to check: then nothing is pretended, the JSON says what is missing.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BUDGET_S = 600.0
STARTED = time.monotonic()


def remaining(reserve: float = 0.0) -> float:
    """Seconds left of the 10-minute budget, less ``reserve`` for what must still run."""
    return BUDGET_S - (time.monotonic() - STARTED) - reserve


def log(text: str) -> None:
    print(f"[gpu-check {time.monotonic() - STARTED:5.0f}s] {text}", file=sys.stderr, flush=True)


def finish(result: dict[str, Any], code: int) -> None:
    result["seconds"] = round(time.monotonic() - STARTED, 1)
    result["seconds_goal"] = f"<{BUDGET_S:.0f}"
    print(json.dumps(result, default=str))
    sys.exit(code)


# -- what machine is this -------------------------------------------------------------------


def find_gpu() -> dict[str, Any]:
    """GPU 0 as NVML sees it; raises with what is missing."""
    import pynvml

    pynvml.nvmlInit()
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            raise RuntimeError("NVML finds no GPU")
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        text = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
        return {
            "name": text(pynvml.nvmlDeviceGetName(h)),
            "uuid": text(pynvml.nvmlDeviceGetUUID(h)),
            "driver": text(pynvml.nvmlSystemGetDriverVersion()),
            "count": int(pynvml.nvmlDeviceGetCount()),
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
            "mem_total_mib": pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**20,
        }
    finally:
        pynvml.nvmlShutdown()


def torch_cuda() -> dict[str, Any]:
    code = (
        "import json, torch; ok = torch.cuda.is_available(); print(json.dumps({'torch': "
        "torch.__version__, 'cuda': torch.version.cuda, 'available': ok, 'nccl': "
        "'.'.join(map(str, torch.cuda.nccl.version())) if ok else None}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"torch does not import: {done.stderr.strip()[-300:]}")
    info: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if not info["available"]:
        raise RuntimeError(f"torch {info['torch']} sees no CUDA GPU")
    return info


# -- 1. sampling ----------------------------------------------------------------------------

LOAD = r"""
import sys, time, urllib.request, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
grow = []
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
    if len(grow) < 8:
        grow.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))  # +1 GiB a step
        time.sleep(0.5)
body = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[2]).read()
open(sys.argv[3], "wb").write(body)
"""


def check_sampling(gpu: dict[str, Any], seconds: float = 10.0) -> dict[str, Any]:
    """Run the agent beside the load on GPU 0 and judge what it sampled and served."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        scrape = Path(tmp) / "metrics.txt"
        env = {**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0",
               "KTRAIN_JOB_NAME": "gpu-check", "PYTHONPATH": str(ROOT)}  # fmt: skip
        cmd = [sys.executable, "-m", "jupyter_ktrain.pod.agent", "--gpu-sampling", "on",
               "--interval", "1", "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
               "--", sys.executable, "-c", LOAD, str(seconds), str(port), str(scrape)]  # fmt: skip
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        text = scrape.read_text() if scrape.exists() else ""
    out = judge_sampling(done.stdout.splitlines(), gpu, text)
    out["agent_exit"] = done.returncode
    if done.returncode != 0:
        out.update(ok=False, error=(done.stdout + done.stderr)[-800:])
    return out


def judge_sampling(lines: list[str], gpu: dict[str, Any], scraped: str) -> dict[str, Any]:
    """Pure: the agent's output lines and one scrape of its endpoint against GPU 0's facts
    (``uuid``, ``power_limit_w``, ``mem_total_mib``) -> figures, ``failed`` checks, ``ok``."""
    from jupyter_ktrain.pod.protocol import GPU, parse_line, record_type

    recs = [r for r in (parse_line(x).record for x in lines) if r and record_type(r) == GPU]
    out: dict[str, Any] = {"records": len(recs)}
    if len(recs) < 3:
        return {**out, "ok": False, "failed": ["records"], "error": "\n".join(lines[-10:])}
    ts = [r["t"] for r in recs]
    gaps = sorted(b - a for a, b in itertools.pairwise(ts))
    col = {k: [r[k] for r in recs if k in r] for k in ("util", "power", "temp", "mem_used")}
    served = served_uuids(scraped, "ktrain_gpu_utilization_percent")
    out.update(
        uuids_seen=sorted({r["uuid"] for r in recs}),
        interval_s_median=round(gaps[len(gaps) // 2], 3),
        util_max=max(col["util"]),
        power_w_max=max(col["power"], default=None),
        power_limit_w=gpu["power_limit_w"],
        temp_c=[min(col["temp"], default=None), max(col["temp"], default=None)],
        mem_used_mib=[col["mem_used"][0], max(col["mem_used"])] if col["mem_used"] else None,
        prometheus_uuid=served[0] if served else None,
    )
    mem = col["mem_used"]
    checks = {
        "right_uuid": out["uuids_seen"] == [gpu["uuid"]],
        "one_hz": abs(out["interval_s_median"] - 1.0) <= 0.05,
        "util_in_range": all(0 <= u <= 100 for u in col["util"]) and out["util_max"] >= 50,
        "power_in_range": bool(col["power"])
        and all(0 < p <= gpu["power_limit_w"] * 1.1 for p in col["power"]),
        "temp_in_range": bool(col["temp"]) and all(5 <= t <= 110 for t in col["temp"]),
        "memory_rises": bool(mem)
        and max(mem) - mem[0] >= 2048
        and max(mem) <= gpu["mem_total_mib"],
        "prometheus": out["prometheus_uuid"] == gpu["uuid"],
    }
    out["failed"] = [k for k, v in checks.items() if not v]
    out["ok"] = not out["failed"]
    return out


def served_uuids(text: str, family: str) -> list[str]:
    """The ``uuid`` labels of ``family`` in a scrape: with Prometheus' own parser where it is
    installed (the dev extra), else by pattern (a GPU machine may have only the runtime)."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return re.findall(family + r'\{[^}]*uuid="([^"]+)"', text)
    samples = {f.name: f.samples for f in text_string_to_metric_families(text)}.get(family, [])
    return [s.labels["uuid"] for s in samples if "uuid" in s.labels]


# -- 2. overhead ----------------------------------------------------------------------------


def check_overhead() -> dict[str, Any]:
    cmd = [sys.executable, str(ROOT / "bench" / "agent.py"), "--real", "--pairs", "4",
           "--steps", "500"]  # fmt: skip
    limit = min(300.0, remaining(reserve=200))  # the jobs below need ~3 minutes
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, cwd=ROOT)
    if done.returncode != 0:
        return {"ok": False, "error": (done.stdout + done.stderr)[-800:]}
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    ok = (
        figures["training"].startswith("bf16")  # the GPU loop ran, not the CPU fallback
        and figures["gpu_records"] > 0
        and figures["step_time_overhead_pct"] < 0.5
    )
    return {"ok": ok, **figures}


# -- 3-6. jobs through %%ktrain ---------------------------------------------------------------

CELLS = r"""
import json, os, time, torch
import torch.distributed as dist

def nccl_sum():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    t = torch.ones(1, device="cuda") * (dist.get_rank() + 1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()

def ds_train(steps):
    import deepspeed
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    deepspeed.init_distributed(dist_backend="nccl")
    config = json.load(open(os.environ["KTRAIN_DEEPSPEED_CONFIG"]))
    config["zero_allow_untested_optimizer"] = True
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    x = torch.randn(2, 256, device=engine.device, dtype=torch.bfloat16)
    losses = []
    for _ in range(steps):
        loss = (engine(x).float() - 1.0).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses

def oom():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    return torch.empty(1 << 45, dtype=torch.uint8, device="cuda")  # 32 TiB

def device_assert():
    t = torch.zeros(3, device="cuda")
    return t[torch.tensor([5], device="cuda")].sum().item()

def stuck_in_nccl(stuck_at=10):
    # each step an all-reduce; at step `stuck_at` one rank stops: with two GPUs rank 1 never
    # enters the next all-reduce (rank 0 waits inside NCCL); with one, the GPU spins in a
    # kernel the all-reduce queues behind, so the rank waits in NCCL's synchronize
    import time
    import jupyter_ktrain as ktrain
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    t = torch.ones(1, device="cuda")
    for step in range(1000):
        if step == stuck_at:
            if dist.get_world_size() == 1:
                torch.cuda._sleep(1 << 62)
            elif dist.get_rank() == 1:
                time.sleep(3600)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        ktrain.report(step=step, total=1000)
        time.sleep(0.1)

def gpu_steps(steps, pause):
    import jupyter_ktrain as ktrain
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    model = torch.nn.Linear(2048, 2048).cuda()
    x = torch.randn(512, 2048, device="cuda")
    print("gpu steps up", flush=True)
    for step in range(steps):
        loss = model(x).pow(2).mean()
        loss.backward()
        dist.all_reduce(model.weight.grad)
        ktrain.report(step=step, loss=loss.item())
        time.sleep(pause)

def two_ranks_one_gpu():
    dist.init_process_group("nccl")  # no set_device(LOCAL_RANK): both ranks on cuda:0
    t = torch.ones(1, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    return t.item()
"""


class Kernel:
    """A real IPython shell with the extension loaded, jobs in a temporary registry."""

    def __init__(self, home: Path) -> None:
        from IPython.core.interactiveshell import InteractiveShell

        os.environ["KTRAIN_HOME"] = str(home)
        os.environ["KTRAIN_MONITOR"] = "text"
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        self.shell = InteractiveShell.instance()
        self.shell.extension_manager.load_extension("jupyter_ktrain")
        if not self.shell.run_cell(CELLS, store_history=True).success:
            raise RuntimeError("the check's notebook cell did not run")

    def run(
        self,
        name: str,
        flags: str,
        cell: str,
        timeout: float,
        failing: bool = False,
        out: Any = None,
    ) -> Any:
        """``%%ktrain --name NAME FLAGS`` following the job; cancelled after ``timeout``. A job
        meant to fail (``failing``): the cell raises ``JobFailed`` as it should, and the job
        comes back as attached after its end, to be judged by its status and logs. The cell's
        output goes to ``out`` (default: stderr; stdout is the JSON line)."""
        from jupyter_ktrain.backends.local import LocalBackend
        from jupyter_ktrain.errors import JobFailed

        timeout = min(timeout, remaining(reserve=15))
        if timeout < 20:
            raise TimeoutError(f"no time left of the {BUDGET_S:.0f} s budget for {name}")
        watchdog = threading.Timer(timeout, lambda: LocalBackend().cancel(name))
        watchdog.start()
        try:  # the job's output goes to stderr: stdout is the JSON line
            with contextlib.redirect_stdout(out or sys.stderr):
                return self.shell.run_cell_magic("ktrain", f"--name {name} {flags}", cell)
        except JobFailed:
            if not failing:
                raise
            log(f"{name} failed, as it should")
            return self.attach(name)
        finally:
            watchdog.cancel()

    def attach(self, name: str) -> Any:
        """The job ``name`` of this kernel's registry."""
        from jupyter_ktrain.backends.local import LocalBackend

        return LocalBackend().attach(name)


ONE_GPU = "--nodes 1 --procs-per-node 1 --gpus-per-node 1"


def check_nccl(kernel: Kernel) -> tuple[dict[str, Any], dict[str, Any]]:
    from jupyter_ktrain.monitor.nccl import parse_nccl_log

    flags = f"{ONE_GPU} --env NCCL_DEBUG=INFO --env NCCL_DEBUG_SUBSYS=INIT,NET"
    job = kernel.run("gc-nccl", flags, "total = nccl_sum()\n", 120)
    state = job.state
    total = kernel.shell.user_ns.get("total")
    job_out = {"ok": state == "Succeeded" and total == 1.0, "state": state, "result": total}
    log_text = job.logs()
    transport = parse_nccl_log(log_text)
    has_ib = Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir())
    verdict: dict[str, Any] = {"infiniband_on_machine": has_ib}
    if transport is None:
        verdict.update(ok=False, error="no NCCL transport line in the job's log")
    else:
        verdict.update(
            kind=transport.kind,
            network=transport.network,
            rdma=transport.rdma,
            evidence=transport.evidence,
            ok=has_ib or not transport.rdma,  # no IB device: never an RDMA verdict (D2)
        )
    version = re.search(r"NCCL version ([\d.]+)", log_text)
    verdict["nccl"] = version.group(1) if version else None
    return job_out, verdict


def check_deepspeed(kernel: Kernel) -> dict[str, Any]:
    try:
        import deepspeed  # noqa: F401
    except ImportError as exc:
        return {"ok": False, "error": f"deepspeed is not installed here ({exc})"}
    flags = f"{ONE_GPU} --deepspeed zero3 --bf16 --micro-batch 2 --grad-accum 1"
    job = kernel.run("gc-ds", flags, "losses = ds_train(20)\n", 240)
    losses = kernel.shell.user_ns.get("losses")
    fine = isinstance(losses, list) and len(losses) == 20 and all(map(math.isfinite, losses))
    return {
        "ok": job.state == "Succeeded" and fine and losses[-1] < losses[0],
        "state": job.state,
        "loss_first_last": [losses[0], losses[-1]] if fine else losses,
    }


FAILURES = {
    "oom": ("oom()\n", ONE_GPU, "OOM"),
    "device_assert": ("device_assert()\n", ONE_GPU, "CUDA error"),
    "two_ranks_one_gpu": (
        "two_ranks_one_gpu()\n",
        "--nodes 1 --procs-per-node 2 --gpus-per-node 1",
        "NCCL error",
    ),
}


def check_failures(kernel: Kernel) -> dict[str, Any]:
    from jupyter_ktrain.failures import classify

    out: dict[str, Any] = {}
    for key, (cell, flags, want) in FAILURES.items():
        job = kernel.run(f"gc-{key.replace('_', '-')}", flags, cell, 120, failing=True)
        status = job.status()
        rank = status.failed_rank
        if rank is None:
            out[key] = {"ok": False, "state": status.state, "error": "no failed rank"}
            continue
        failure = classify(job.logs(rank=rank).splitlines(), status.exit_codes.get(rank))
        repeated = str(failure).count(failure.kind) > 1
        out[key] = {"ok": failure.kind == want and not repeated, "class": str(failure)}
    out["ok"] = all(v["ok"] for v in out.values())
    return out


class _Tee:
    """A cell's output, to stderr as it comes and kept to be searched."""

    def __init__(self) -> None:
        self.text = ""
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        sys.stderr.write(text)
        with self.lock:
            self.text += text
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()


def check_stuck_nccl(kernel: Kernel, hang_after: float = 30.0) -> dict[str, Any]:
    """A rank stuck in an NCCL all-reduce is named, with where it waits, long before NCCL's
    own watchdog (10 min by default) would end the job: two ranks on two GPUs (rank 1 never
    enters the collective), else one rank whose GPU spins ahead of it."""
    import torch

    from jupyter_ktrain.backends.local import LocalBackend

    gpus = min(2, torch.cuda.device_count())
    flags = f"--nodes 1 --procs-per-node {gpus} --gpus-per-node {gpus}"
    flags += f" --hang-after {hang_after:.0f}s"
    tee, done = _Tee(), threading.Event()

    def cell() -> None:
        try:
            kernel.run("gc-stuck", flags, "stuck_in_nccl()\n", 300, failing=True, out=tee)
        finally:
            done.set()

    started = time.monotonic()
    threading.Thread(target=cell, daemon=True).start()
    named_after = None
    while not done.wait(1.0):
        if "has made no progress" in tee.text:
            named_after = time.monotonic() - started
            break
        if time.monotonic() - started > 240:
            break
    LocalBackend().cancel("gc-stuck")
    done.wait(60)
    text = tee.text
    line = next((ln for ln in text.splitlines() if "has made no progress" in ln), "")
    stuck = "rank 1" if gpus == 2 else "rank 0"
    return {
        "ok": named_after is not None and stuck in line and named_after < 600,
        "ranks": gpus,
        "hang_after_s": hang_after,
        "named_after_s": round(named_after, 1) if named_after is not None else None,
        "nccl_watchdog_s": 600,
        "said": line.strip(),
        "where": next((ln.strip() for ln in text.splitlines() if " waits in " in ln), ""),
    }


def check_profile(kernel: Kernel) -> dict[str, Any]:
    """``%ktrain profile`` of a running GPU job: the table in CUDA time, CUDA kernels in it."""
    from jupyter_ktrain.backends.local import LocalBackend
    from jupyter_ktrain.frontends.commands import run as run_command

    name = "gc-profile"
    with contextlib.redirect_stdout(sys.stderr):
        kernel.shell.run_cell_magic(
            "ktrain", f"--name {name} {ONE_GPU} --detach", "gpu_steps(1_000_000, 0.01)\n"
        )
    try:
        deadline = time.monotonic() + min(120.0, remaining(reserve=60))
        while "gpu steps up" not in LocalBackend().attach(name).logs():
            if time.monotonic() > deadline:
                return {"ok": False, "error": "the job did not start its steps in time"}
            time.sleep(0.5)
        text = run_command(["profile", name, "--steps", "3", "--backend", "local"]).text
    finally:
        LocalBackend().cancel(name)
    log(text)
    return judge_profile(text)


def judge_profile(text: str) -> dict[str, Any]:
    """The profile table of a GPU job: in CUDA time, rank 0's top rows CUDA kernels, a share
    of compute; the kernels it named."""
    kernels = re.findall(r"^  (\S.*?) +\d+ +[\d.]+ m?s +\d+%$", text, re.M)
    row = re.search(r"^  rank 0 +\S+ +[\d.]+ m?s +(\d+)% +(\d+)% +(\d+)%$", text, re.M)
    compute = int(row.group(1)) if row else None
    cuda = "(CUDA time)" in text and "top CUDA kernels" in text
    known = [k for k in kernels if re.search(r"gemm|kernel|nccl|elementwise|reduce", k, re.I)]
    return {
        "ok": cuda and bool(known) and (compute or 0) > 0,
        "cuda_time": cuda,
        "compute_percent": compute,
        "kernels": kernels[:5],
    }


# -- main -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def guarded(name: str, fn: Callable[[], Any]) -> Any:
    log(f"{name} ...")
    t0 = time.monotonic()
    try:
        result = fn()
    except Exception as exc:  # one check failing must not hide the others
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    log(f"{name}: {'ok' if _ok(result) else 'FAILED'} ({time.monotonic() - t0:.0f}s)")
    return result


def _ok(result: Any) -> bool:
    if isinstance(result, tuple):
        return all(_ok(r) for r in result)
    return bool(result.get("ok"))


def main() -> None:
    result: dict[str, Any] = {"check": "gpu acceptance (issue 11)"}
    try:
        result["gpu"] = find_gpu()
        result["torch"] = torch_cuda()
    except Exception as exc:
        result.update(ok=False, error=f"no NVIDIA GPU to check here: {type(exc).__name__}: {exc}")
        finish(result, 2)
    gpu = result["gpu"]
    log(f"GPU 0: {gpu['name']} ({gpu['uuid']}), driver {gpu['driver']}")
    result["sampling"] = guarded("sampling", lambda: check_sampling(result["gpu"]))
    result["overhead"] = guarded("overhead", check_overhead)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            kernel = Kernel(Path(tmp) / "ktrain-home")
        except Exception as exc:
            kernel = None
            result["kernel_error"] = f"{type(exc).__name__}: {exc}"
        if kernel is not None:
            nccl = guarded("nccl_1x1", lambda: check_nccl(kernel))
            if isinstance(nccl, tuple):
                result["nccl_1x1"], result["nccl_transport"] = nccl
            else:
                result["nccl_1x1"] = result["nccl_transport"] = nccl
            result["deepspeed_zero3_bf16"] = guarded("deepspeed", lambda: check_deepspeed(kernel))
            result["failures"] = guarded("failures", lambda: check_failures(kernel))
            result["stuck_nccl"] = guarded("stuck_nccl", lambda: check_stuck_nccl(kernel))
            result["profile"] = guarded("profile", lambda: check_profile(kernel))
    names = ("sampling", "overhead", "nccl_1x1", "nccl_transport", "deepspeed_zero3_bf16",
             "failures", "stuck_nccl", "profile")  # fmt: skip
    failed = [n for n in names if not _ok(result.get(n, {}))]
    result["failed"] = failed
    result["ok"] = not failed and time.monotonic() - STARTED < BUDGET_S
    finish(result, 0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
