"""Local backend overhead against plain torchrun, same machine, same run.

Measures, for a 2 nodes x 2 processes gloo job that prints one line per rank, all-reduces and
exits: (a) time from "cell start" to the first line of every rank and (b) total wall time,
for our path (capture + local backend + follow loop, as a %%ktrain cell does) and for the
peer (two `python -m torch.distributed.run` commands with the same arguments, read directly).
Runs alternate; medians are reported. Goal: ours at most 1.1x the peer.
"""

from __future__ import annotations

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jupyter_ktrain.backends.local import LocalBackend  # noqa: E402
from jupyter_ktrain.capture import capture  # noqa: E402
from jupyter_ktrain.monitor.follow_loop import follow  # noqa: E402
from jupyter_ktrain.spec.job import JobSpec  # noqa: E402

NODES, NPROC, ROUNDS = 2, 2, int(os.environ.get("BENCH_ROUNDS", "5"))

SCRIPT = """
import os
print(f"hello from rank {os.environ['RANK']}", flush=True)
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peer(tmp: Path) -> tuple[float, float]:
    script = tmp / "peer.py"
    script.write_text(SCRIPT)
    port = _port()
    start = time.perf_counter()
    first: dict[str, float] = {}
    lock = threading.Lock()
    procs = []
    for node in range(NODES):
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={NODES}",
            f"--nproc-per-node={NPROC}",
            f"--node-rank={node}",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            str(script),
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        )

    def read(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            # ranks share the pipe without line atomicity: "hello from rank 0hello from rank 1"
            for rank in re.findall(r"hello from rank (\d)", raw.decode()):
                with lock:
                    first.setdefault(rank, time.perf_counter() - start)

    threads = [threading.Thread(target=read, args=(p,)) for p in procs]
    for t in threads:
        t.start()
    for p in procs:
        p.wait()
    for t in threads:
        t.join()
    total = time.perf_counter() - start
    if len(first) != NODES * NPROC or any(p.returncode for p in procs):
        raise RuntimeError(f"plain torchrun run failed: {first}")
    return max(first.values()), total


class _FirstLines:
    def __init__(self, start: float):
        self.start = start
        self.first: dict[int, float] = {}

    def lines(self, replica: str, lines: list) -> None:  # type: ignore[type-arg]
        for line in lines:
            if line.rank is not None and line.text.startswith("hello from rank"):
                self.first.setdefault(line.rank, time.perf_counter() - self.start)

    def status(self, status: object) -> None:
        pass


def ours(tmp: Path, index: int) -> tuple[float, float]:
    os.environ["KTRAIN_HOME"] = str(tmp / "home")
    cell = SCRIPT  # the cell body itself: what a user would put under %%ktrain
    start = time.perf_counter()
    program = capture(cell, {}, [], ())
    spec = JobSpec(name=f"bench-{index}", nodes=NODES, procs_per_node=NPROC)
    job = LocalBackend().submit(spec, program)
    sink = _FirstLines(start)
    status = follow(job, sink)
    total = time.perf_counter() - start
    if status.state != "Succeeded" or len(sink.first) != NODES * NPROC:
        raise RuntimeError(f"our run failed: {status} {sink.first}")
    return max(sink.first.values()), total


def main() -> None:
    peer_first, peer_total, our_first, our_total = [], [], [], []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for i in range(ROUNDS):
            f, t = peer(tmp)
            peer_first.append(f)
            peer_total.append(t)
            f, t = ours(tmp, i)
            our_first.append(f)
            our_total.append(t)
            print(
                f"round {i}: peer first-line {peer_first[-1]:.2f}s total {peer_total[-1]:.2f}s"
                f" | ours first-line {our_first[-1]:.2f}s total {our_total[-1]:.2f}s",
                flush=True,
            )
    pf, pt = statistics.median(peer_first), statistics.median(peer_total)
    of, ot = statistics.median(our_first), statistics.median(our_total)
    print(
        json.dumps(
            {
                "peer_first_line_all_ranks_s": round(pf, 3),
                "ours_first_line_all_ranks_s": round(of, 3),
                "first_line_ratio_vs_torchrun": round(of / pf, 3),
                "first_line_ratio_vs_torchrun_goal": "<=1.1",
                "peer_total_s": round(pt, 3),
                "ours_total_s": round(ot, 3),
                "total_ratio_vs_torchrun": round(ot / pt, 3),
                "total_ratio_vs_torchrun_goal": "<=1.1",
            }
        )
    )


if __name__ == "__main__":
    main()
