"""``python -m jupyter_ktrain.backends.local_supervisor JOB_DIR``: owns one local job.

Started detached (its own session) by the local backend, so the job outlives the kernel. It
starts one node command per node from ``plan.json``, copies each node's output to
``node-K.log`` (like a pod log) and each rank's lines to ``rank-R.log``, keeps ``state.json``
current (with the job's progress from records that carry a ``total``, at most once a second),
and on SIGTERM (cancel) stops every process of the job. Like the Training Operator,
the job fails as soon as one node fails: the other nodes get a short grace period, then are
stopped, because surviving ranks would otherwise block in a collective until a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

from ..monitor.progress import ProgressTracker
from ..monitor.protocol import format_agent_line, parse_line
from .procs import kill_marked

__all__ = ["main", "write_state"]

GRACE_AFTER_FAILURE_S = 5.0
CANCEL_LINE = (format_agent_line("cancelled by the user") + "\n").encode()
PROGRESS_SAVE_S = 1.0
TERM_TIMEOUT_S = 10.0


def write_state(job_dir: Path, state: dict[str, Any]) -> None:
    tmp = job_dir / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, job_dir / "state.json")


class Supervisor:
    def __init__(self, job_dir: Path):
        self.dir = job_dir
        self.plan = json.loads((job_dir / "plan.json").read_text())
        self.marker = self.plan["marker"]
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pumps: list[threading.Thread] = []
        self.rank_files: dict[int, IO[bytes]] = {}
        self.exit_codes: dict[int, int] = {}
        self.first_failure: tuple[float, int] | None = None
        self.cancelled = False
        self.progress = ProgressTracker()
        self.progress_rank: int | None = None
        self.progress_saved = 0.0
        self.state: dict[str, Any] = {
            "state": "Pending",
            "supervisor_pid": os.getpid(),
            "created": time.time(),
            "nodes": [],
        }

    def save(self, **changes: Any) -> None:
        with self.lock:
            self.state.update(changes)
            self.state["exit_codes"] = {str(k): v for k, v in sorted(self.exit_codes.items())}
            if self.first_failure:
                self.state["failed_rank"] = self.first_failure[1]
            write_state(self.dir, self.state)

    # -- output ---------------------------------------------------------------------------
    def _rank_file(self, rank: int) -> IO[bytes]:
        if rank not in self.rank_files:
            self.rank_files[rank] = open(self.dir / f"rank-{rank}.log", "ab", buffering=0)  # noqa: SIM115
        return self.rank_files[rank]

    def _pump(self, node: int, stream: IO[bytes]) -> None:
        folded = False
        node_log = open(self.dir / f"node-{node}.log", "ab", buffering=0)  # noqa: SIM115
        times = open(self.dir / f"node-{node}.times", "ab", buffering=0)  # noqa: SIM115

        def write(data: bytes) -> None:
            # the arrival time of each line, like a pod log's timestamps: merging the nodes'
            # logs by time (the side panel's "all ranks") needs it
            times.write(b"%.6f\n" % time.time())
            node_log.write(data if data.endswith(b"\n") else data + b"\n")

        with node_log, times:
            for raw in iter(stream.readline, b""):
                line = parse_line(raw.decode("utf-8", "replace").rstrip("\n"))
                if self.cancelled and line.source == "node":
                    # torchrun's teardown (its SignalException traceback) after a cancel says
                    # nothing the user does not know: one line instead
                    if not folded:
                        folded = True
                        write(CANCEL_LINE)
                    continue
                write(raw)
                if line.rank is None:
                    continue
                if line.record is None:
                    with self.lock:
                        self._rank_file(line.rank).write(line.text.encode() + b"\n")
                elif line.record.get("type") == "exit":
                    self._on_rank_exit(line.rank, int(line.record.get("code", 1)))
                elif "total" in line.record:
                    self._on_progress(line.rank, line.record)

    def _on_progress(self, rank: int, record: dict[str, Any]) -> None:
        step, total, t = record.get("step"), record.get("total"), record.get("t")
        if not (isinstance(step, int) and isinstance(total, int)):
            return
        with self.lock:  # the lowest rank that reports progress is the job's
            if self.progress_rank is None or rank < self.progress_rank:
                self.progress, self.progress_rank = ProgressTracker(), rank
            if rank != self.progress_rank:
                return
            now = time.time()
            p = self.progress.update(step, total, float(t) if isinstance(t, (int, float)) else now)
            if now - self.progress_saved < PROGRESS_SAVE_S and not p.done:
                return
            self.progress_saved = now
            self.state["progress"] = p.to_dict()
        self.save()

    def _on_rank_exit(self, rank: int, code: int) -> None:
        with self.lock:
            self.exit_codes[rank] = code
            if code != 0 and self.first_failure is None:
                self.first_failure = (time.time(), rank)
        self.save()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        base_env = dict(os.environ)
        for node, launch in enumerate(self.plan["nodes"]):
            proc = subprocess.Popen(
                launch["argv"],
                env={**base_env, **launch["env"]},
                cwd=launch["cwd"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            self.procs.append(proc)
            assert proc.stdout is not None
            pump = threading.Thread(target=self._pump, args=(node, proc.stdout), daemon=True)
            pump.start()
            self.pumps.append(pump)
        nodes = [{"pid": p.pid, "exit_code": None} for p in self.procs]
        self.save(state="Running", started=time.time(), nodes=nodes)

    def terminate(self, *_args: Any) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def on_cancel(self, _signum: int, _frame: FrameType | None) -> None:
        self.cancelled = True
        self.terminate()

    def wait(self) -> None:
        failed_at: float | None = None
        terminated_at: float | None = None
        while True:
            codes = [p.poll() for p in self.procs]  # poll every node, every time
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
                self.save(nodes=self._nodes())
            stop = self.cancelled or (failed_at and now - failed_at > GRACE_AFTER_FAILURE_S)
            if stop and terminated_at is None:
                terminated_at = now
                self.terminate()
            if terminated_at and now - terminated_at > TERM_TIMEOUT_S:
                kill_marked(self.marker, exclude={os.getpid()})
            time.sleep(0.05)
        for pump in self.pumps:
            pump.join(timeout=5.0)
        kill_marked(self.marker, exclude={os.getpid()})  # nothing of the job outlives it

    def _nodes(self) -> list[dict[str, Any]]:
        return [{"pid": p.pid, "exit_code": _code(p.returncode)} for p in self.procs]

    def finish(self) -> None:
        nodes = self._nodes()
        codes = [n["exit_code"] for n in nodes]
        if self.cancelled:
            state, reason = "Cancelled", "CancelledByUser"
        elif all(c == 0 for c in codes):
            state, reason = "Succeeded", "AllRanksSucceeded"
        else:
            state = "Failed"
            reason = "RankFailed" if self.first_failure else "NodeFailed"
        if self.first_failure is None and state == "Failed" and not self.cancelled:
            bad = next(i for i, c in enumerate(codes) if c != 0)
            self.state["failed_node"] = bad
        if self.progress.progress is not None:  # the last update may have been held back
            self.state["progress"] = self.progress.progress.to_dict()
        self.save(state=state, reason=reason, finished=time.time(), nodes=nodes)


def _code(returncode: int | None) -> int | None:
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str]) -> int:
    """``[--daemon] JOB_DIR``: with --daemon, fork into a new session and return at once, so the
    caller can reap us and the job is nobody's child (no zombie, survives the kernel)."""
    if argv and argv[0] == "--daemon":
        argv = argv[1:]
        if os.fork():
            return 0
        os.setsid()
    job_dir = Path(argv[0])
    sup = Supervisor(job_dir)
    signal.signal(signal.SIGTERM, sup.on_cancel)
    signal.signal(signal.SIGINT, sup.on_cancel)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the kernel's terminal going away is fine
    try:
        sup.start()
        sup.wait()
    except Exception as exc:  # never leave a job in "Running" with nothing behind it
        sup.terminate()
        sup.save(state="Failed", reason="SupervisorError", message=str(exc), finished=time.time())
        kill_marked(sup.marker, exclude={os.getpid()})
        raise
    sup.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
