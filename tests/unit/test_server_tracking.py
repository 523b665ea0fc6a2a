"""One process at a time logs a job to MLflow: the right to do it (an exclusive lock in the
job's record folder), and the server leaving alone a job someone else logs or nobody tracks."""

from __future__ import annotations

import subprocess
import sys

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.server.tracking import ServerTracking
from jupyter_ktrain.store.records import hold, job_dir, release, write_record

HOLD_IN_CHILD = """
import sys
from jupyter_ktrain.store.records import hold
print(hold("local", "j") is None)
"""


def test_the_right_to_log_a_job_is_one_holders_at_a_time() -> None:
    first = hold("local", "j")
    assert first is not None
    assert hold("local", "j") is None  # another follower in this process
    child = subprocess.run([sys.executable, "-c", HOLD_IN_CHILD], capture_output=True, text=True)
    assert child.stdout.strip() == "True", child.stderr  # another process (the kernel)
    assert hold("local", "other") is not None  # per job
    release(first)
    again = hold("local", "j")
    assert again is not None
    release(again)
    assert oct((job_dir("local", "j") / ".tracking.lock").stat().st_mode & 0o777) == "0o600"


def test_the_server_leaves_alone_untracked_and_finished_jobs_and_those_held() -> None:
    tracking = ServerTracking()
    backend = LocalBackend()
    running = JobStatus("j", "Running", started=1.0)
    write_record("local", "j", {"name": "j", "params": {}})  # untracked
    tracking.poll(backend, "j", running)
    assert tracking._jobs == {}
    record = {"name": "j", "mlflow": {"uri": "http://127.0.0.1:9", "experiment": "e", "sent": {}}}
    write_record("local", "j", {**record, "mlflow": {**record["mlflow"], "finished": True}})
    tracking.poll(backend, "j", running)
    assert tracking._jobs == {}
    write_record("local", "j", record)
    held = hold("local", "j")  # a kernel follows it
    try:
        tracking.poll(backend, "j", running)
        assert tracking._jobs == {}
    finally:
        release(held)
