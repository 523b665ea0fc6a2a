"""One vocabulary end to end: one terminal rule, replica phases as words that compare equal,
and the panel's replica payload built from the one replica type, the same JSON as before."""

from __future__ import annotations

import json

from jupyter_ktrain.backends.base import Backend, Job
from jupyter_ktrain.jobs import (
    JOB_STATES,
    TERMINAL_STATES,
    JobStatus,
    ReplicaPhase,
    ReplicaStatus,
    is_terminal,
)
from jupyter_ktrain.monitor.follow_loop import follow
from jupyter_ktrain.pod.protocol import LogLine
from jupyter_ktrain.server.build import replica_payload
from jupyter_ktrain.words import describe, status_words


def test_every_state_is_an_end_or_not_by_one_rule() -> None:
    for state in JOB_STATES:
        assert JobStatus("j", state).terminal == is_terminal(state) == (state in TERMINAL_STATES)
        assert is_terminal(str(state)) == is_terminal(state)  # a word read from a file
    assert is_terminal("Deleted")
    assert not is_terminal(None)
    assert {s for s in JOB_STATES if is_terminal(s)} == {
        "Succeeded",
        "Failed",
        "Cancelled",
        "Deleted",
    }


class _Gone(Backend):
    """A backend whose job reads Running once, then Deleted."""

    name = "test"

    def __init__(self) -> None:
        self.asked = 0

    def status(self, name: str) -> JobStatus:
        self.asked += 1
        return JobStatus(name, "Running" if self.asked == 1 else "Deleted")

    def log_sources(self, name: str) -> list:  # type: ignore[type-arg]
        return []

    dryrun = schedule = cancel = list_jobs = delete = read_logs = None  # type: ignore[assignment]


class _Sink:
    def __init__(self) -> None:
        self.states: list[str] = []

    def lines(self, replica: str, lines: list[LogLine]) -> None:
        pass

    def status(self, status: JobStatus) -> None:
        self.states.append(status.state)


def test_a_deleted_job_ends_the_follow_loop() -> None:
    sink = _Sink()
    slept: list[float] = []
    final = follow(Job("j", _Gone()), sink, sleep=slept.append)
    assert final.state == "Deleted"
    assert sink.states == ["Running", "Deleted"]
    assert len(slept) == 1  # it stopped at once, it did not poll a gone job forever


def test_replica_phases_are_words_that_compare_equal() -> None:
    r = ReplicaStatus("j-node-0", "Running")  # as read from an API or a history file
    assert r.phase is ReplicaPhase.RUNNING
    assert r.phase == "Running"
    assert f"{r.phase}" == str(r.phase) == "Running"
    assert json.dumps(r.phase) == '"Running"'
    assert ReplicaStatus("p", "SomethingNew").phase is ReplicaPhase.UNKNOWN
    assert ReplicaStatus("p", "NotCreated") == ReplicaStatus("p", ReplicaPhase.NOT_CREATED)


def test_the_replica_payload_is_the_same_json_built_from_the_replica_itself() -> None:
    r = ReplicaStatus(
        "j-node-1",
        "Running",
        restarts=1,
        node="n1",
        last_event="Started",
        restart_cause="restarted after exit 137 (SIGKILL)",
    )
    assert json.dumps(replica_payload(r, 3)) == json.dumps(
        {
            "name": "j-node-1",
            "phase": "Running",
            "restarts": 1,
            "node": "n1",
            "exit_code": None,
            "last_event": "Started",
            "restart_text": "j-node-1 restarted after exit 137 (SIGKILL) (restart 1 of at most 3)",
        }
    )
    assert replica_payload(ReplicaStatus("j-node-0", "Pending"), None)["restart_text"] == ""


def test_one_function_words_a_status_for_every_view() -> None:
    status = JobStatus("j", "Failed", "Error", failed_rank=1, exit_codes={1: 3})
    said = status_words(status, 0.0)
    assert said.line == describe(status, 0.0) == "Failed · Error"
    assert said.message == "rank 1 failed first (exit code 3)"
    assert (said.progress, said.warm, said.restarting, said.replicas) == (None, None, False, ())
