"""What a node costs beside the ranks: the memory of each of our processes while a job runs.

A 1-node x 2-rank gloo job on the local backend (each local node is what a pod runs: the
agent, the fork server, torchrun and the ranks forked from it, and the small processes
torchrun starts, each asking the server for its rank and passing its output, signals and exit
code through), submitted with
``ktrain.submit`` as a script does. Once every rank has all-reduced, every process of the job
is read from ``/proc/PID/smaps_rollup``: its PSS (proportional set size: a page shared by N
processes counts 1/N in each, so the figures add up to what the node really holds; RSS counts
the pages a forked rank shares with the fork server again in every rank) and its RSS.

The peer, in the same run: plain ``torchrun`` with the same two ranks doing the same, its
processes read the same way: what the ranks and their launcher cost without us.

Then the same job with ``--env KTRAIN_FORK_SERVER=0`` (no fork server: a restarted rank imports
torch again). Goal: the agent under 100 MB (it never imports torch). Prints one JSON object
last.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jupyter_ktrain as ktrain  # noqa: E402

HOLD_S = 20  # how long the ranks wait after their all-reduce (the processes are read then)

PEER = """
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1); dist.all_reduce(t)
print("ready", flush=True)
time.sleep(float(sys.argv[1]))
dist.destroy_process_group()
"""


def train(hold: float) -> None:
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print("ready", flush=True)
    time.sleep(hold)
    dist.destroy_process_group()


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def memory(pid: int) -> tuple[str, float, float] | None:
    """(command line, PSS MB, RSS MB) of ``pid``; None once it is gone."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in rollup.splitlines()[1:] if "kB" in ln}
    cmd = " ".join(a.decode(errors="replace") for a in args if a)
    return cmd, kb.get("Pss", 0) / 1024, kb.get("Rss", 0) / 1024


_SERVER = "jupyter_ktrain.pod.agent.forks"


def role(cmd: str, parent: str, children: list[str]) -> str:
    """What the process of command line ``cmd`` is, from its own, its parent's and its
    children's command lines (a process forked by the fork server keeps the server's)."""
    if f"{_SERVER} --run" in cmd:
        return "torchrun's requester"
    if _SERVER in cmd and _SERVER in parent and "--run" not in parent:
        forked_torchrun = any("jupyter_ktrain.pod.runtime" in c for c in children)
        return "torchrun (forked)" if forked_torchrun else "rank (forked)"
    if _SERVER in cmd:
        return "fork server"
    if "jupyter_ktrain.pod.agent" in cmd:
        return "agent"
    if "jupyter_ktrain.backends.local.daemon" in cmd:
        return "local supervisor (not in a pod)"
    if "torch.distributed.run" in cmd or "torchrun" in cmd:
        return "torchrun"
    if "jupyter_ktrain.pod.runtime" in cmd or "peer.py" in cmd:
        return "rank's requester" if _SERVER in parent else "rank"
    return cmd[:60]


def read(pids: list[int]) -> dict[str, list[tuple[float, float]]]:
    out: dict[str, list[tuple[float, float]]] = {}
    parents = {pid: _parent(pid) for pid in pids}
    for pid in pids:
        got = memory(pid)
        if got is not None:
            kids = [_cmd(k) for k, up in parents.items() if up == pid]
            out.setdefault(role(got[0], _cmd(parents[pid]), kids), []).append((got[1], got[2]))
    return out


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def ours(tmp: Path, env: tuple[str, ...] = ()) -> dict[str, list[tuple[float, float]]]:
    os.environ["KTRAIN_HOME"] = str(tmp / "home")
    flags: dict[str, object] = {"env": list(env)} if env else {}
    name = "podmem-off" if env else "podmem"
    job = ktrain.submit(train, args=(HOLD_S,), nodes=1, procs_per_node=2, name=name, **flags)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and job.logs().count("ready") < 2:
        time.sleep(0.5)
    if job.logs().count("ready") < 2:
        raise SystemExit(f"the job's ranks did not all-reduce: {job.logs()[-2000:]}")
    time.sleep(1)
    daemons = [
        int(d)
        for d in os.listdir("/proc")
        if d.isdigit() and _cmd(int(d)).endswith(f"/{name} ") and "local.daemon" in _cmd(int(d))
    ]
    pids = sorted({p for d in daemons for p in tree(d)})
    got = read(pids)
    job.cancel()
    return got


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def peer(tmp: Path) -> dict[str, list[tuple[float, float]]]:
    script = tmp / "peer.py"
    script.write_text(PEER)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", str(script), str(HOLD_S)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen += "ready" in line
        if seen == 2:
            break
    time.sleep(1)
    pids = tree(proc.pid)
    got = read(pids)
    for p in pids:
        with contextlib.suppress(OSError):
            os.kill(p, 9)
    proc.wait()
    return got


def total(got: dict[str, list[tuple[float, float]]], pods_only: bool = True) -> float:
    return sum(p for r, xs in got.items() for p, _ in xs if not (pods_only and "not in" in r))


def show(title: str, got: dict[str, list[tuple[float, float]]]) -> None:
    print(title)
    for r, xs in sorted(got.items()):
        for pss, rss in xs:
            print(f"  {r:34s} PSS {pss:7.1f} MB   RSS {rss:7.1f} MB")
    print(f"  {'in the pod, all together':34s} PSS {total(got):7.1f} MB")


def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        mine = ours(tmp)
        off = ours(tmp, ("KTRAIN_FORK_SERVER=0",))
        theirs = peer(tmp)
    show("ours: a node of 2 ranks (what its pod runs)", mine)
    show("ours with --env KTRAIN_FORK_SERVER=0 (no fork server)", off)
    show("peer: plain torchrun, 2 ranks", theirs)
    agent = max(p for p, _ in mine["agent"])
    extra = total(mine) - total(theirs)
    print(json.dumps({
        "agent_pss_mb": round(agent, 1),
        "agent_pss_mb_goal": "<100",
        "node_pss_mb": round(total(mine), 1),
        "node_pss_mb_fork_server_off": round(total(off), 1),
        "peer_torchrun_pss_mb": round(total(theirs), 1),
        "node_beside_torchrun_mb": round(extra, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
