"""A run delivered into a warm pod: the envelope the kernel seals with the job's key, and what the
pod's ``deliver`` refuses (another key, a changed body, another job, a replay) before anything
reaches its run folder.

The tests of tests/unit/test_warm_deliver.py that start processes (a unit test starts none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.backends.kubernetes.client.kube_api import Api as RealApi
from jupyter_ktrain.pod.agent.deliver import (
    REFUSED,
    STALE,
    seal,
)
from jupyter_ktrain.pod.agent.mirror import folder_seq
from tests.unit.test_warm_deliver import JOB, KEY, _configmap, _next


def _deliver_process(folder: Path, line: bytes, key: str = KEY) -> subprocess.CompletedProcess:  # type: ignore[type-arg]
    env = {**os.environ, "KTRAIN_WARM_KEY": key, "KTRAIN_WARM_CONFIGMAP": JOB,
           "KTRAIN_WARM_CONTROL": str(folder)}  # fmt: skip
    argv = [sys.executable, "-m", "jupyter_ktrain.pod.agent.deliver"]
    return subprocess.run(argv, input=line, env=env, capture_output=True, timeout=60)


def test_the_pods_command_says_one_line_and_exits_non_zero_when_refused(tmp_path: Path) -> None:
    line = seal("cd" * 32, JOB, _configmap())
    got = _deliver_process(tmp_path, line)
    assert got.returncode == REFUSED
    assert got.stderr.decode().strip() == "refused: the signature does not match this job's key"
    assert not (tmp_path / "control.json").exists()
    assert not (tmp_path / "runs").exists()  # no run reached the folder
    ok = _deliver_process(tmp_path, seal(KEY, JOB, _configmap()))
    assert (ok.returncode, ok.stderr.decode().strip()) == (0, "delivered run 1")
    assert json.loads((tmp_path / "control.json").read_text())["run"] == 1
    assert _deliver_process(tmp_path, seal(KEY, JOB, _configmap())).returncode == STALE


class _DroppingApi:
    """The Api calls a Courier makes, with each ``exec`` running the pod's real ``deliver``
    command on a folder here; the first ``drops`` connections are lost after the command ran
    (the pod applied the order, the kernel never heard)."""

    def __init__(self, folder: Path, drops: int) -> None:
        self.folder, self.drops, self.execs = folder, drops, 0

    def get(self, path: str, query: object = None) -> dict:  # type: ignore[type-arg]
        if "/secrets/" in path:
            import base64

            return {"data": {"key": base64.b64encode(KEY.encode()).decode()}}
        pod = {"metadata": {"name": "w-worker-0"}, "status": {"phase": "Running"},
               "spec": {"containers": [{"name": "pytorch", "command": [sys.executable],
                                        "env": [{"name": "KTRAIN_WARM_CONFIGMAP"}]}]}}  # fmt: skip
        return {"items": [pod]}

    # the client's verbs, as the real client has them over this get
    find = RealApi.find
    items = RealApi.items

    def exec(self, namespace, pod, container, command, stdin=b"", timeout=30.0):  # type: ignore[no-untyped-def]
        from jupyter_ktrain.backends.kubernetes.client.kube_api import ExecLost, ExecResult

        self.execs += 1
        got = _deliver_process(self.folder, stdin)
        if self.drops:
            self.drops -= 1
            raise ExecLost(f"exec in pod {pod}: connection to remote host was lost")
        return ExecResult(got.returncode, got.stdout.decode(), got.stderr.decode())


def test_a_delivery_whose_connection_drops_is_tried_again_and_applied_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jupyter_ktrain.backends.kubernetes.warm import delivery as warm_delivery
    from jupyter_ktrain.backends.kubernetes.warm.delivery import Courier

    monkeypatch.setattr(warm_delivery, "EXEC_RETRY_S", 0.0)
    api = _DroppingApi(tmp_path, drops=1)
    courier = Courier(api)  # type: ignore[arg-type]
    assert courier.deliver("ns", "w", _configmap()) == []  # the second try reads STALE: taken
    assert api.execs == 2
    assert folder_seq(tmp_path)[1] == 1
    # a pod that never answers is said, with the tries
    api.drops = 5
    problems = courier.deliver("ns", "w", _next(_configmap(), "print('run 2')\n"))
    assert problems == [
        "pod w-worker-0: exec in pod w-worker-0: connection to remote host was lost (tried 3 times)"
    ]
