"""A deterministic CPU training function that checkpoints and resumes (``ktrain.checkpoint``),
for the tests that kill a rank mid-run and compare with an uninterrupted run.

``SETUP`` is a notebook cell: it defines ``train(steps, every, kill_at, marks, hold_at,
pause)``. Each rank draws its batches from its own seeded generator; the model, the optimizer
and every rank's generator state are saved every ``every`` steps, so a resumed run computes
exactly what an uninterrupted one does. With ``kill_at``, the last rank kills itself with
SIGKILL right after that step, once (a file in ``marks`` remembers it across the restart). With
``hold_at``, the rank whose torchrun agent does not host the rendezvous store stops after that
step instead, once, and writes its pod's name (``$HOSTNAME``) to ``marks/held``: the test
deletes that pod. (On a cluster the store is on the endpoint's pod, worker-0; here every pod
shares this machine's network, so whichever agent bound the port first hosts it: the rank
asks.) It returns the final weights and the first step this run trained. ``pause`` seconds of
sleep after each step pace a run that a test kills from outside.
"""

from __future__ import annotations

SETUP = """
import os, signal, time
import torch
import torch.distributed as dist
import jupyter_ktrain as ktrain

def _hosts_store():
    # does this rank's torchrun agent (its parent) listen on the rendezvous port?
    port = "%04X" % int(os.environ.get("PET_RDZV_ENDPOINT", ":23456").rsplit(":", 1)[1])
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.readlines()[1:]:
                cols = row.split()
                if cols[1].endswith(":" + port) and cols[3] == "0A":  # 0A: LISTEN
                    inodes.add(cols[9])
    launcher = int(os.environ.get("KTRAIN_LAUNCHER_PID") or os.getppid())  # a forked rank's
    fds = f"/proc/{launcher}/fd"
    for fd in os.listdir(fds):
        try:
            link = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            return True
    return False

def train(steps=12, every=3, kill_at=None, marks=None, hold_at=None, pause=0.0):
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    data = torch.Generator().manual_seed(1234 + rank)
    ckpt = ktrain.checkpoint()
    start = 0
    found = ckpt.load()
    if found is not None:
        state, step = found
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        data.set_state(state["data"][rank])
        start = step + 1
    print(f"rank {rank} trains steps {start}-{steps - 1}", flush=True)
    for step in range(start, steps):
        x = torch.randn(16, 8, generator=data)
        loss = torch.nn.functional.mse_loss(ddp(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ktrain.report(step=step, total=steps, loss=loss.item())
        if step % every == every - 1:
            gens = [None] * world
            dist.all_gather_object(gens, data.get_state())
            ckpt.save({"model": model.state_dict(), "opt": opt.state_dict(), "data": gens}, step)
        mark = os.path.join(marks or ".", "killed")
        if kill_at == step and rank == world - 1 and not os.path.exists(mark):
            open(mark, "a").close()
            os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a lost node would
        held = os.path.join(marks or ".", "held")
        pod = os.environ.get("HOSTNAME", "")
        if hold_at == step and not os.path.exists(held) and not _hosts_store():
            with open(held + ".tmp", "w") as f:
                f.write(pod)
            os.replace(held + ".tmp", held)
            time.sleep(600)  # until the test deletes this pod
        time.sleep(pause)
    weights = [p.detach().clone() for p in model.parameters()]
    dist.destroy_process_group()
    return weights, start
"""
