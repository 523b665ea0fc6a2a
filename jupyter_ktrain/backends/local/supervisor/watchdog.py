"""The watchdog of a local job: the parent of its supervisor (:mod:`.supervisor`), which only
waits for it. When the supervisor ends before the job did (``kill -9``, the kernel's OOM killer,
a crash), the watchdog stops every process of the job (found by its marker, :mod:`.procs`) and
writes the job's final state, Failed with the reason, also at the end of every node's log."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from ....failures import signal_text
from ....jobs import FAILED, TERMINAL_STATES
from ....pod.protocol import format_agent_line
from ....pod.stacks import STACKS_DIR_ENV
from ....store.jobdirs import job_marker, release_reserve
from ..joblog import SIGNAL_BASE, JobLog
from ..procs import marked_pids, stop_marked
from ..request import read_plan
from ..state import LocalState, change_state, read_state

__all__ = ["watch"]


def watch(job_dir: Path, supervisor: int) -> int:
    """The supervisor's parent: wait for it, and when it ended before the job did (killed, or
    crashed), stop every process of the job and write the job's final state with the reason.
    Returns 0 when it had nothing to do, 1 when it had to end the job."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    marker = job_marker(job_dir)  # the folder may hold another job later (--replace)
    _, status = os.waitpid(supervisor, 0)
    if marker is None or job_marker(job_dir) != marker:
        return 0
    _remove_stacks_dir(job_dir)
    if (read_state(job_dir) or LocalState()).state in TERMINAL_STATES:
        return 0
    how, reason = _how_it_ended(status)
    who = f"its supervisor (pid {supervisor}) {how}"
    stopping = f"{who}; stopping the job's processes"
    change_state(job_dir, marker, reason=reason, message=stopping, supervisor_end=who)
    running = len(marked_pids(marker))
    left = stop_marked(marker, exclude={os.getpid()})
    if left:  # unkillable (stuck in the kernel): the job still runs, and says so
        return 1
    what = (
        f"stopped the {running} process(es) of the job that still ran"
        if running
        else "none of the job's processes was left"
    )
    message = f"{who} before the job ended; {what}. Run it again (add --replace to reuse the name)."
    ended = {"state": FAILED, "reason": reason, "message": message, "finished": time.time()}
    if change_state(job_dir, marker, **ended):
        _tell_node_logs(job_dir, message)
        release_reserve(job_dir)
    return 1


def _remove_stacks_dir(job_dir: Path) -> None:
    """The job's folder of rank sockets (``ktrain stacks``, outside the job's folder for a
    socket path's length): gone with the job, whichever way it ended."""
    with contextlib.suppress(Exception):
        folder = read_plan(job_dir).nodes[0].env.get(STACKS_DIR_ENV)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def _how_it_ended(status: int) -> tuple[str, str]:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        who = " (the OOM killer, or a kill -9)" if number == signal.SIGKILL else ""
        return f"was killed by {signal_text(SIGNAL_BASE + number)}{who}", "SupervisorKilled"
    code = os.WEXITSTATUS(status)
    return f"exited with code {code} (see supervisor.log)", "SupervisorFailed"


def _tell_node_logs(job_dir: Path, message: str) -> None:
    """The reason at the end of every node's log too, where a user reading logs looks."""
    line = (format_agent_line(message) + "\n").encode()
    for path in sorted(job_dir.glob("node-*.log")):
        with contextlib.suppress(OSError):
            log = JobLog(path)
            try:
                log.write(line)
            finally:
                log.close()
