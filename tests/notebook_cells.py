"""Notebook cells shared by the tests that run real jobs from a %%ktrain cell."""

from __future__ import annotations

import re
from typing import Any

ALLREDUCE_TRAIN = """
import os, time
import torch
import torch.distributed as dist
import jupyter_ktrain as ktrain

def train(scale):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()} sum {t.item()}", flush=True)
    ktrain.report(step=1, allreduced=t.item())
    dist.destroy_process_group()
    return t.item() * scale
"""

PACED_LOOP = """
import time
import jupyter_ktrain as ktrain

def paced(n, pause):
    for i in range(1, n + 1):
        time.sleep(pause)
        ktrain.report(step=i, total=n, loss=1.0 / i)
    return n
"""

# every rank reports a step after each all-reduce, 5 steps a second; at ``hang_step`` rank
# ``slow_rank`` sleeps before the all-reduce, so the others wait inside it
HANG_CELL = """\
import time
import torch
import torch.distributed as dist
import jupyter_ktrain as ktrain

def steps_then_hang(hang_step, slow_rank):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    for step in range(10_000):
        if step == hang_step and rank == slow_rank:
            time.sleep(600)
        dist.all_reduce(t)
        ktrain.report(step=step, loss=1.0 / (step + 1))
        time.sleep(0.2)

def first_all_reduce_hang(slow_rank):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    print(f"rank {rank} joined", flush=True)
    if rank == slow_rank:
        time.sleep(600)
    dist.all_reduce(torch.ones(1))
"""
HANG_SLEEP_LINE = 12  # the line of ``time.sleep(600)`` in HANG_CELL's function
FIRST_HANG_SLEEP_LINE = 22  # the same in ``first_all_reduce_hang``: before any all-reduce

# every rank "computes", reports its step, then all-reduces; rank ``slow_rank`` is slowed by a
# busy loop of ``slow`` seconds a step, the others take 0.1 s (asleep: two cores are shared)
STRAGGLER_CELL = """
import time
import torch
import torch.distributed as dist
import jupyter_ktrain as ktrain

def uneven(steps, slow_rank, slow):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.ones(1)
    for step in range(steps):
        if rank == slow_rank:
            end = time.perf_counter() + slow
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(0.1)
        ktrain.report(step=step, loss=1.0 / (step + 1))
        dist.all_reduce(t)
    dist.destroy_process_group()
    return steps
"""


def extension_shell(setup: str):  # type: ignore[no-untyped-def]
    """Body of a ``shell`` fixture: the IPython shell with the extension loaded and ``setup``
    run as a cell, reset afterwards (a generator: ``yield from extension_shell(CELLS)``)."""
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    assert sh.run_cell(setup, store_history=True).success
    yield sh
    sh.reset(new_session=True)


def reported(job: Any, name: str) -> dict[int, list[float]]:
    """rank -> the values it gave ``name`` with ``ktrain.report``, as the monitor reads them
    from the job's stored logs (``Job`` of any backend)."""
    from jupyter_ktrain.monitor.live import model_from_logs

    shape = job.backend.shape(job.name)
    kind = shape.kind if shape else None
    model = model_from_logs(job.name, job.backend.read_logs(job.name), kind=kind)
    return {
        rank: list(series.points()[1])
        for (rank, metric), series in sorted(model.metrics.items())
        if metric == name
    }


# a Ray driver (RayJob): tasks spread over the Ray nodes, each reporting and printing where it ran
RAY_CELL = """
import socket
import time

import jupyter_ktrain as ktrain
import ray


def spread(n):
    ray.init()

    @ray.remote(scheduling_strategy="SPREAD")
    def where(i):
        time.sleep(1)
        ktrain.report(step=i, task=float(i))
        print(f"task {i} on {socket.gethostname()}", flush=True)
        return socket.gethostname()

    hosts = ray.get([where.remote(i) for i in range(n)])
    print(f"driver saw {len(set(hosts))} hosts", flush=True)
    return sorted(hosts)


def failing():
    ray.init()

    @ray.remote
    def load(shard):
        raise ValueError(f"shard {shard} is empty")

    return ray.get(load.remote(3))
"""


# ``ktrain stacks`` tests (local and cluster): rank ``slow_rank`` sleeps inside ``wait_here``,
# the others in ``stall`` itself, until the job is cancelled
STACKS_CELL = """
import os, time

def wait_here(seconds):
    time.sleep(seconds)

def stall(slow_rank):
    rank = int(os.environ["RANK"])
    print(f"rank {rank} up", flush=True)
    if rank == slow_rank:
        wait_here(600)
    else:
        time.sleep(600)
"""
STACKS_WAIT_HERE = re.compile(
    r'File "cell \[(\d+)\]", line 4, in wait_here\n +time\.sleep\(seconds\)'
)
STACKS_STALL = re.compile(r'File "cell \[(\d+)\]", line 12, in stall\n +time\.sleep\(600\)')

# every rank trains a small DDP model on gloo, all-reduces, and reports each step: what
# ``%ktrain profile`` profiles (real aten ops, a real gloo all-reduce)
PROFILE_CELL = """
import time
import torch
import torch.distributed as dist
import jupyter_ktrain as ktrain

def train_steps(steps, pause):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256)
    print(f"rank {rank} up", flush=True)
    for step in range(steps):
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = torch.ones(16384)
        dist.all_reduce(t)
        ktrain.report(step=step, loss=loss.item())
        time.sleep(pause)
    dist.destroy_process_group()
    return steps
"""
