"""One process at a time logs a job to MLflow: the right to do it (an exclusive lock in the
job's record folder), and the server leaving alone a job someone else logs or nobody tracks."""

from __future__ import annotations

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.runner.track_detached import ServerTracking
from jupyter_ktrain.store.records import hold, release, write_record


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
