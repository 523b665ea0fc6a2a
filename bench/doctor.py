"""What "why is it slow, why is it stuck" costs (issue 37): the runtime's and the watch's
overhead on a training step, and the time from ``stacks`` to every rank's stack on 16 ranks.

1. **Overhead.** The same DDP training loop (gloo, 1 node x 2 ranks, one thread each, an MLP
   step of about 0.1 s on this machine's CPU: short for a GPU job, whose steps take 0.1-2 s)
   runs through ``ktrain.run`` on the local backend without and with a ``ktrain.report``
   each step, followed here with the hang and straggler watch on
   (:class:`~jupyter_ktrain.hangs.HangWatch`,
   :class:`~jupyter_ktrain.monitor.stragglers.StepTimes`): with reports, the watch has every
   step to time. Runs in ABBA pairs; each run's median step (after warm-up); the overhead is
   the median over pairs; the same loop under plain ``torchrun`` once, for scale. On a shared
   2-core machine the run-to-run noise (several %) is larger than the effect, so the cost is
   also taken directly: in the job, the median time of the ``ktrain.report`` call each step
   makes (``report_us``: tens of microseconds after a step, where a tight loop of calls
   takes 6, as a step leaves the caches cold), and here the watch's CPU time per reported line
   (``watch_us_per_line``); their share of a step is the figure held to the goal.
2. **Stacks on 16 ranks.** A 4 x 4 local job whose ranks wait in a gloo all-reduce loop;
   ``%ktrain stacks NAME`` (the command's handler) timed until every rank's stack is shown,
   against the peer people use by hand, ``py-spy dump`` of each rank's process in turn.

``--pairs N --steps N`` trade precision for time. Last line: one JSON object.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, installed or not
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])

import jupyter_ktrain as ktrain  # noqa: E402
from jupyter_ktrain.backends.local import LocalBackend  # noqa: E402
from jupyter_ktrain.hangs import HangWatch  # noqa: E402
from jupyter_ktrain.monitor.stragglers import StepTimes  # noqa: E402
from jupyter_ktrain.pod.protocol import Metric, format_rank_line, parse_line  # noqa: E402
from jupyter_ktrain.rank_stacks import show_stacks  # noqa: E402

WARMUP = 20  # steps left out of a run's median


def train(steps: int, report: bool, out: str = "") -> dict[str, float]:
    """An MLP trained with DDP on gloo; each step timed (and the report call on its own)."""
    import time

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 1024)
    )
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x = torch.randn(256, 1024)
    steps_s, reports_s = [], []
    for step in range(steps):
        began = time.perf_counter()
        loss = (ddp(x) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if report:
            import jupyter_ktrain as ktrain

            t = time.perf_counter()
            ktrain.report(step=step, total=steps, loss=loss.item())
            reports_s.append(time.perf_counter() - t)
        steps_s.append(time.perf_counter() - began)
    dist.destroy_process_group()
    got = {
        "step_s": statistics.median(steps_s[WARMUP:]),
        "report_s": statistics.median(reports_s[WARMUP:]) if reports_s else 0.0,
    }
    if out and dist_rank() == 0:
        Path(out).write_text(json.dumps(got))
    return got


def dist_rank() -> int:
    return int(os.environ.get("RANK", "0"))


def spin() -> None:
    """A rank that waits in gloo all-reduces until cancelled (what a stack should show)."""
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.zeros(1)
    while True:
        dist.all_reduce(t)
        time.sleep(0.05)


# -- 1. overhead -----------------------------------------------------------------------------
def plain_run(steps: int) -> float:
    """The peer: the loop under plain torchrun (1 node x 2 ranks); rank 0's median step."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "times.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node", "2", __file__, "--plain", str(steps), str(out)]  # fmt: skip
        subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
        return float(json.loads(out.read_text())["step_s"])


def ktrain_run(steps: int, report: bool, name: str) -> tuple[float, float]:
    """The loop through ``ktrain.run`` (followed here, the watch on), reporting each step or
    not: rank 0's median step and median report call."""
    job = ktrain.run(train, args=(steps, report), nodes=1, procs_per_node=2, name=name)
    got = job.result
    return float(got["step_s"]), float(got["report_s"])


def watch_us_per_line(lines: int = 20_000) -> float:
    """CPU microseconds this process spends on one rank's report line in the watch: parse,
    the hang watch's note, the step-time estimate (8 ranks reporting in turn)."""
    watch, times = HangWatch(), StepTimes()
    raw = [
        format_rank_line(
            i % 8, Metric(rank=i % 8, t=i * 0.01, step=i // 8, values={"loss": 0.5}).format()
        )
        for i in range(lines)
    ]
    t0 = time.thread_time()
    for i, text in enumerate(raw):
        line = parse_line(text)
        record = line.typed
        if isinstance(record, Metric) and line.rank is not None and record.t is not None:
            watch.heard(line.rank, record.t, record.step)
            if record.step is not None:
                times.feed(line.rank, record.step, record.t, world=8)
        if i % 64 == 0:
            watch.check(i * 0.01)
    return (time.thread_time() - t0) / lines * 1e6


def overhead(pairs: int, steps: int) -> dict[str, Any]:
    """ABBA pairs of the same job without and with a report each step (so with and without
    anything for the watch to do); plain torchrun once, for scale."""
    rel: list[float] = []
    steps_off: list[float] = []
    reports: list[float] = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
        got: dict[bool, float] = {}
        for report in order:
            got[report], took = ktrain_run(steps, report, f"doctor-{i}-{int(report)}")
            if report:
                reports.append(took)
        steps_off.append(got[False])
        rel.append((got[True] - got[False]) / got[False] * 100)
        print(f"no reports {got[False] * 1e3:.2f} ms/step   reports {got[True] * 1e3:.2f} ms/step")
    step = statistics.median(steps_off)
    plain = plain_run(steps)
    per_line = watch_us_per_line()
    return {
        "step_ms": round(step * 1e3, 2),
        "step_ms_plain_torchrun": round(plain * 1e3, 2),
        "report_and_watch_overhead_pct": round(statistics.median(rel), 2),
        "overhead_spread_pct": [round(min(rel), 2), round(max(rel), 2)],
        "report_us": round(statistics.median(reports) * 1e6, 1),
        "watch_us_per_line": round(per_line, 2),
        # the job's own cost each step (its report call) and this process's watch of the
        # world's lines (2 ranks' here), as a share of a step: the figure held to the goal
        "runtime_and_watch_share_pct": round(
            (statistics.median(reports) + 2 * per_line * 1e-6) / step * 100, 3
        ),
        "runtime_and_watch_share_pct_goal": "<0.5",
    }


# -- 2. stacks on 16 ranks -------------------------------------------------------------------
def stacks_16(name: str = "doctor-stacks", ranks: int = 16) -> dict[str, Any]:
    backend = LocalBackend()
    job = ktrain.submit(spin, nodes=4, procs_per_node=4, name=name)
    try:
        deadline = time.monotonic() + 300
        while True:  # every rank up and in its loop
            got = backend.stacks(name)
            inside = {s.rank for _, s in got if any("spin" in str(t) for t in s.threads)}
            if len(inside) == ranks:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(inside)} of {ranks} ranks answered in 300 s")
            time.sleep(1)
        pids = sorted(s.pid for _, s in got if s.pid)
        times, shown = [], ""
        for _ in range(3):
            t0 = time.perf_counter()
            shown = show_stacks(backend, name, None)
            times.append(time.perf_counter() - t0)
        assert shown.startswith(f"Stacks of {name!r}, {ranks} ranks"), shown[:200]
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        peer = None
        if Path(spy).exists():
            t0 = time.perf_counter()
            for pid in pids:  # by hand, one process after another
                subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, check=True)
            peer = time.perf_counter() - t0
    finally:
        job.cancel()
    ours = statistics.median(times)
    return {
        "ranks": ranks,
        "stacks_s": round(ours, 3),
        "stacks_s_goal": "<3",
        "py_spy_dump_each_rank_s": round(peer, 3) if peer is not None else None,
        "speedup_vs_py_spy": round(peer / ours, 1) if peer is not None else None,
    }


def _arg(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def main() -> None:
    pairs, steps = _arg("--pairs", 2), _arg("--steps", 100)
    home = Path(tempfile.mkdtemp(prefix="ktrain-doctor-"))  # the jobs' store, removed after
    os.environ["KTRAIN_HOME"] = str(home)
    os.environ.setdefault("KTRAIN_MONITOR", "text")
    try:
        result = {"cpus": os.cpu_count(), "pairs": pairs, "order": "ABBA", "steps": steps}
        result.update(overhead(pairs, steps))
        result.update(stacks_16())
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--plain":
        train(int(sys.argv[2]), False, sys.argv[3])
    else:
        main()
