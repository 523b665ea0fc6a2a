"""A run delivered into a warm pod: the envelope the kernel seals with the job's key, and what the
pod's ``deliver`` refuses (another key, a changed body, another job, a replay) before anything
reaches its run folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_ktrain.backends.kubernetes.warm.orders import control_of, order_run, with_control
from jupyter_ktrain.packaging.configmap import render_code_configmap
from jupyter_ktrain.pod.agent.deliver import (
    REFUSED,
    STALE,
    Refused,
    deliver,
    open_envelope,
    seal,
    sign,
)
from jupyter_ktrain.pod.agent.mirror import folder_seq

KEY = "ab" * 32
JOB = "w-code"


def _configmap(run_text: str = "print('run 1')\n") -> dict:  # type: ignore[type-arg]
    cm = render_code_configmap(JOB, "ns", {"program.py": run_text.encode()})
    return with_control(cm, {"run": 1, "abort": {}, "idle_limit_s": 900.0})


def _next(cm: dict, text: str) -> dict:  # type: ignore[type-arg]
    body, _run = order_run(cm, render_code_configmap(JOB, "ns", {"program.py": text.encode()}))
    return body


def test_an_envelope_opens_with_the_jobs_key_into_the_same_order() -> None:
    cm = _configmap()
    line = seal(KEY, JOB, cm)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    opened = open_envelope(KEY, JOB, line)
    assert control_of(opened) == control_of(cm)
    assert opened["data"]["program.py"] == "print('run 1')\n"
    envelope = json.loads(line)
    assert envelope["sig"] == sign(KEY, envelope["body"].encode())
    assert KEY not in line.decode()  # the key itself never travels


@pytest.mark.parametrize(
    ("tamper", "words"),
    [
        (lambda e: {**e, "sig": sign("cd" * 32, e["body"].encode())}, "signature does not match"),
        (lambda e: {k: v for k, v in e.items() if k != "sig"}, "not a signed warm-run envelope"),
        (lambda e: {**e, "body": e["body"].replace("run 1", "run X")}, "signature does not match"),
        (lambda e: {**e, "v": 0}, "not a signed warm-run envelope"),
    ],
)
def test_a_wrong_or_missing_signature_is_refused(tamper, words) -> None:  # type: ignore[no-untyped-def]
    envelope = tamper(json.loads(seal(KEY, JOB, _configmap())))
    with pytest.raises(Refused, match=words) as info:
        open_envelope(KEY, JOB, json.dumps(envelope).encode())
    assert info.value.code == REFUSED


def test_the_signed_run_must_be_the_order_applied_and_for_this_job() -> None:
    envelope = json.loads(seal(KEY, JOB, _configmap()))
    body = json.loads(envelope["body"])
    body["run"] = 7  # signed, but not what the order inside says
    text = json.dumps(body)
    forged = {"v": 1, "body": text, "sig": sign(KEY, text.encode())}
    with pytest.raises(Refused, match="run does not match its order"):
        open_envelope(KEY, JOB, json.dumps(forged).encode())
    with pytest.raises(Refused, match="this pod is 'other-code'"):
        open_envelope(KEY, "other-code", seal(KEY, JOB, _configmap()))


def test_only_a_newer_order_is_applied_no_replay(tmp_path: Path) -> None:
    first = _configmap()
    second = _next(first, "print('run 2')\n")
    assert deliver(seal(KEY, JOB, first), KEY, JOB, tmp_path) == 1
    for old in (first, first):  # the same envelope again: nothing changes
        with pytest.raises(Refused, match="stale") as info:
            deliver(seal(KEY, JOB, old), KEY, JOB, tmp_path)
        assert info.value.code == STALE
    assert deliver(seal(KEY, JOB, second), KEY, JOB, tmp_path) == 2
    with pytest.raises(Refused, match="stale"):
        deliver(seal(KEY, JOB, first), KEY, JOB, tmp_path)  # run 1 is over
    assert folder_seq(tmp_path) == (2, 2)
    aborted = with_control(second, {**control_of(second), "abort": {"2": "cancelled"}})
    assert deliver(seal(KEY, JOB, aborted), KEY, JOB, tmp_path) == 2  # same run, newer order
    assert (tmp_path / "runs" / "2" / "abort").read_text() == "cancelled"
