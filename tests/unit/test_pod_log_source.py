"""The order of events that lost a restarted master's log: the container ended (exit 143),
the pod stayed ``Failed`` for a moment before the operator deleted it and made it anew (its
ExitCode policy). The stream must wait for the new pod and follow it, not end with the old one.
The cache and the API are replayed here in the order the real cluster produced them."""

from __future__ import annotations

import threading
import time
from typing import Any

from jupyter_ktrain.backends.kubernetes.client.kube_api import Api as RealApi
from jupyter_ktrain.backends.kubernetes.client.retries import ApiFailure
from jupyter_ktrain.backends.kubernetes.logs.pod import (
    FollowedLines,
    PodLogSource,
    format_stamp,
    split_stamped,
)


def _pod(uid: str, phase: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "ft-master-0", "uid": uid},
        "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "state": state}]},
    }


RUNNING: dict[str, Any] = {"running": {}}
EXITED: dict[str, Any] = {"terminated": {"exitCode": 143}}


class _Watch:
    namespace = "ns"

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.gen = 0
        self.pod: dict[str, Any] | None = _pod("a", "Running", RUNNING)
        self.job: dict[str, Any] | None = {
            "status": {"conditions": [{"type": "Running", "status": "True"}]}
        }

    @property
    def pods(self) -> dict[str, dict[str, Any]]:
        return {} if self.pod is None else {"ft-master-0": self.pod}

    def set(self, pod: dict[str, Any] | None = None, job_done: bool = False) -> None:
        with self.cond:
            self.pod = pod
            if job_done:
                self.job = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
            self.gen += 1
            self.cond.notify_all()

    def wait_change(self, seen: int, timeout: float) -> int:
        with self.cond:
            if self.gen == seen:
                self.cond.wait(timeout)
            return self.gen


class _Api:
    """pods/log of whichever pod the watch holds now; a GET of the pod as the API has it."""

    def __init__(self, watch: _Watch) -> None:
        self.watch = watch
        self.lines = {
            "a": [b"2026-11-25T10:00:01.000000000Z rank 0 trains steps 0-11"],
            "b": [b"2026-11-25T10:00:05.000000000Z resumed from step 5"],
        }
        self.first_stream_over = threading.Event()

    def get(self, path: str, query: Any = None) -> Any:
        if self.watch.pod is None:
            raise ApiFailure("not found", status=404)
        return self.watch.pod

    def stream_batches(
        self, path: str, query: Any, read_timeout: float | None = None, partial: bool = False
    ) -> Any:
        pod = self.watch.pod
        if pod is None:
            raise ApiFailure("not found", status=404)
        uid = pod["metadata"]["uid"]
        if uid == "a" and query.get("follow"):
            # the container exits while followed; the pod is Failed, still there
            self.watch.set(_pod("a", "Failed", EXITED))
            self.first_stream_over.set()
        return iter([self.lines[uid]])

    # the client's verbs, as the real client has them over this get and stream
    find = RealApi.find
    logs = RealApi.logs
    log_batches = RealApi.log_batches


def test_a_failed_pod_made_anew_by_the_operator_is_followed_into_its_new_pod() -> None:
    watch = _Watch()
    api = _Api(watch)
    source = PodLogSource(api, watch, "ft-master-0", "pytorch")  # type: ignore[arg-type]
    assert api.first_stream_over.wait(5)
    # a moment later: the operator deletes the failed pod and makes it anew; it runs and ends
    threading.Event().wait(0.3)
    watch.set(None)
    watch.set(_pod("b", "Running", RUNNING))
    threading.Event().wait(0.3)
    watch.set(_pod("b", "Succeeded", {"terminated": {"exitCode": 0}}), job_done=True)
    lines = source.finish()
    assert lines == ["rank 0 trains steps 0-11", "resumed from step 5"]
    assert source.done


def test_a_failed_pod_of_a_job_that_failed_ends_the_stream() -> None:
    watch = _Watch()
    api = _Api(watch)
    source = PodLogSource(api, watch, "ft-master-0", "pytorch")  # type: ignore[arg-type]
    assert api.first_stream_over.wait(5)
    with watch.cond:
        watch.job = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
        watch.gen += 1
        watch.cond.notify_all()
    assert source._ended.wait(5)  # no new pod comes: the stream is over once the job is
    assert source.read() == ["rank 0 trains steps 0-11"]


def test_followed_lines_come_back_with_the_kubelets_timestamps() -> None:
    """What a follow read of a pod, kept in the job store for when the pod is deleted: each
    line with its timestamp as the kubelet stamped it (nanoseconds kept), oldest first; read
    by another process (a new reader of the same job), once even when two followers wrote."""
    job = {"metadata": {"name": "job", "uid": "u-1"}}
    kept = FollowedLines.of_job(job)
    other = FollowedLines.of_job(job)  # a second follower (the panel's server)
    ts = 1_795_712_935_123_456_789
    for writer in (kept, other):
        writer.add("job-master-0", [(ts, "[rank0]: rank 0 loading")])
        writer.add("job-master-0", [(ts + 1, "[rank0]: rank 0 still here")])
    reader = FollowedLines.of_job(job)
    # the second line waits to be written with the next ones (the kubelet sends a line per
    # read): written within FLUSH_S (a timer), or when the stream ends (flush)
    assert reader.lines("job-master-0") == ["[rank0]: rank 0 loading"]
    deadline = time.monotonic() + 5
    while len(reader.lines("job-master-0")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reader.pods() == ["job-master-0"]
    assert reader.lines("job-master-0") == [
        "[rank0]: rank 0 loading",
        "[rank0]: rank 0 still here",
    ]
    stamped = reader.lines("job-master-0", stamped=True)
    assert stamped[0] == "2026-11-26T17:08:55.123456789Z [rank0]: rank 0 loading"
    assert format_stamp(ts) == "2026-11-26T17:08:55.123456789Z"
    assert split_stamped(stamped[0].encode()) == (ts, "[rank0]: rank 0 loading")
    assert reader.lines("job-worker-0") == []
    assert FollowedLines.of_job({"metadata": {"name": "job", "uid": "u-2"}}).pods() == []
    files = list(reader.folder.glob("*.log"))
    assert [oct(f.stat().st_mode & 0o777) for f in files] == ["0o600"]
