"""``python -m jupyter_ktrain.backends.local.daemon --daemon JOB_DIR``: the process the local
backend starts for a job, above the parts it wires: it detaches (its own session, so the job
outlives the kernel), stays as the job's watchdog (:mod:`.watchdog`), and runs the job's
supervisor in its child: :class:`~.supervisor.Supervisor`, or for a ``--warm`` job
:class:`~.warm_supervisor.WarmSupervisor`, whose nodes stay for the next run.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from ...jobs import FAILED
from .procs import kill_marked
from .request import PlanError
from .supervisor.nodes import Supervisor
from .supervisor.warm_job import WarmSupervisor
from .supervisor.watchdog import watch

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """``[--daemon] JOB_DIR``: with --daemon, fork into a new session and return at once, so the
    caller can reap us and the job is nobody's child (no zombie, survives the kernel); the
    session's first process then forks the supervisor and stays as its watchdog."""
    if argv and argv[0] == "--daemon":
        argv = argv[1:]
        if os.fork():
            return 0
        os.setsid()
        child = os.fork()  # no thread runs yet: forking is safe
        if child:
            return watch(Path(argv[0]), child)
    job_dir = Path(argv[0])
    try:
        sup = Supervisor(job_dir)
    except PlanError as exc:  # a newer version's job folder: refused, nothing started
        sys.stderr.write(f"jupyter-ktrain supervisor: {job_dir.name}: {exc}\n")
        return 2
    if sup.plan.warm:  # the nodes stay for the next run (--warm)
        sup = WarmSupervisor(job_dir)
    signal.signal(signal.SIGTERM, sup.on_cancel)
    signal.signal(signal.SIGINT, sup.on_cancel)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the kernel's terminal going away is fine
    try:
        sup.run()
    except Exception as exc:  # never leave a job in "Running" with nothing behind it
        sup.terminate()
        sup.save(state=FAILED, reason="SupervisorError", message=str(exc), finished=time.time())
        kill_marked(sup.marker, exclude={os.getpid()})
        raise
    sup.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
