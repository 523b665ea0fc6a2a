"""The node's agent stops what a rank leaves running when it ends (``pod/agent/orphans.py``):
a rank in a session of its own (as torchrun starts one) starts a helper and is killed with
SIGKILL; the helper, which ignores SIGTERM, must not outlive it while the node goes on."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

NODE = """
import os, signal, subprocess, sys, time
rank = subprocess.Popen(
    [sys.executable, "-c",
     "import os, signal, subprocess, sys\\n"
     "h = subprocess.Popen(['sh', '-c', \\"trap '' TERM; exec sleep 300\\"])\\n"
     "print(h.pid, flush=True)\\n"
     "os.kill(os.getpid(), signal.SIGKILL)\\n"],
    start_new_session=True, stdout=subprocess.PIPE, text=True)
helper = int(rank.stdout.readline())
rank.wait()
print(f"rank killed, helper {helper}", flush=True)
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        os.kill(helper, 0)
    except ProcessLookupError:
        print(f"helper gone after {20 - (deadline - time.monotonic()):.1f} s", flush=True)
        sys.exit(0)
    time.sleep(0.1)
print("helper still running", flush=True)
sys.exit(1)
"""


def _agent(script: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "jupyter_ktrain.pod.agent", "--gpu-sampling", "off", "--"]
    cmd += [sys.executable, "-c", textwrap.dedent(script)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_what_a_killed_rank_left_running_is_stopped_while_the_node_runs_on() -> None:
    done = _agent(NODE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "helper gone" in done.stdout
    helper = done.stdout.split("helper ", 1)[1].split()[0]
    said = [line for line in done.stdout.splitlines() if "left running by a rank" in line]
    assert len(said) == 1, done.stdout
    assert f"pid {helper} (sleep 300)" in said[0]


def test_what_is_still_running_at_the_nodes_end_is_stopped_with_it() -> None:
    script = NODE.replace("deadline = time.monotonic() + 20", "sys.exit(0)\ndeadline = 0")
    done = _agent(script)
    assert done.returncode == 0, done.stdout + done.stderr
    helper = int(done.stdout.split("helper ", 1)[1].split()[0])
    try:  # reaped by the agent before it exited: the pid is gone (or another process's)
        cmd = Path(f"/proc/{helper}/cmdline").read_bytes()
    except OSError:
        cmd = b""
    assert b"sleep\x00300" not in cmd, done.stdout
