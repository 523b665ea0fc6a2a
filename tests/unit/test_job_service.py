"""The job service's verbs (``jupyter_ktrain.runner.verbs``) are what both front ends call: the
line commands (the magic, the console script) and the side panel's core render one result of
one verb. Over local jobs written in place (no process is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.backends.base import Backend
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.errors import BackendError, JobNotFound
from jupyter_ktrain.frontends import commands
from jupyter_ktrain.runner import verbs
from jupyter_ktrain.server.core import PanelCore


def _ended(backend: LocalBackend, name: str, state: str = "Succeeded") -> None:
    folder = backend.job_dir(name)
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text("{}")
    (folder / "job.json").write_text('{"nodes": 1}')
    (folder / "state.json").write_text(f'{{"state": "{state}"}}')
    (folder / "node-0.log").write_text("[rank0]: hello\n")


def test_a_cancel_of_an_ended_job_is_one_result_both_front_ends_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = LocalBackend(tmp_path / "home")
    _ended(backend, "done-a")
    done = verbs.cancel(backend, "done-a")
    assert not done.done  # nothing was stopped: it is as it was
    assert done.before is not None
    assert done.before.state == "Succeeded"
    assert done.after == done.before
    monkeypatch.setattr(verbs.Target, "open", lambda self: backend)
    reply = commands.cancel(verbs.Target("local"), "done-a", None)
    assert reply.text == "'done-a' already ended (Succeeded); nothing to cancel."
    detail = PanelCore({"local": lambda: backend}).cancel("done-a")
    assert detail["name"] == "done-a"
    assert detail["state"] == "Succeeded"
    with pytest.raises(JobNotFound):
        verbs.cancel(backend, "never-was")


def test_a_list_is_one_result_with_each_backend_that_could_not_answer(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "home")
    _ended(backend, "listed-a")

    def unreachable() -> Backend:
        raise BackendError("no cluster here")

    found = verbs.list_jobs([("local", lambda: backend), ("kubernetes", unreachable)])
    assert found.backends == ("local", "kubernetes")
    assert [(b, s.name) for b, s in found.jobs] == [("local", "listed-a")]
    assert found.problems == (("kubernetes", "no cluster here"),)
    panel = PanelCore({"local": lambda: backend, "kubernetes": unreachable}).jobs()
    assert [j["name"] for j in panel["jobs"]] == ["listed-a"]
    assert panel["problems"] == [{"backend": "kubernetes", "error": "no cluster here"}]


def test_logs_of_a_rank_the_job_has_not_is_one_error(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "home")
    _ended(backend, "logs-a")
    assert "hello" in verbs.logs(backend, "logs-a")
    assert verbs.logs(backend, "logs-a", grep="nowhere") == (
        "No line of logs-a contains 'nowhere' (so far)."
    )
