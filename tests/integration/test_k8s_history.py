"""History that outlives the cluster objects: two real PyTorchJobs end, one is removed with
``%ktrain delete``, the other with kubectl (as ``--ttl`` or the operator's clean-up would), and
a fresh kernel still reads their state, logs and curves from the job store: ``%ktrain status``,
``%ktrain logs``, ``%ktrain list`` and ``%ktrain compare``. ``--history`` removes it too."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("kubernetes")

from .k8s_helpers import configured_shell, make_shell

pytestmark = pytest.mark.slow

TRAIN = """
def lr_train(steps):
    rank = int(os.environ["RANK"])
    for step in range(steps):
        print(f"rank {rank} at step {step}", flush=True)
        ktrain.report(step=step, loss=LR * (steps - step))
    return rank
"""


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)


def _gone(test_cluster, name: str) -> None:  # type: ignore[no-untyped-def]
    for what in ("pytorchjob", "pods"):
        args = ("get", what, "-o", "name")
        if what == "pods":
            args += ("-l", f"ktrain.io/job={name}")
            got = test_cluster.kubectl(*args)
            assert got.stdout.strip() == "", got.stdout
        else:
            got = test_cluster.kubectl("get", what, name)
            assert got.returncode != 0, got.stdout
            assert "NotFound" in got.stderr, got.stderr


def test_state_logs_and_curves_outlive_the_deleted_jobs(
    k8s_shell, test_cluster, capsys, tmp_path, monkeypatch
):
    for name, lr, nodes in (("hist-a", 0.1, 2), ("hist-b", 0.2, 1)):
        assert k8s_shell.run_cell(f"LR = {lr}\n" + TRAIN, store_history=True).success
        job = k8s_shell.run_cell_magic(
            "ktrain",
            f"--nodes {nodes} --procs-per-node 1 --image local/python --name {name} --mlflow off",
            "lr_train(12)\n",
        )
        assert job.state == "Succeeded", _out(capsys)
    capsys.readouterr()

    # %ktrain delete removes the cluster objects, says so, and keeps the history
    assert k8s_shell.run_cell("%ktrain delete hist-a").success
    said = _out(capsys)
    ns = test_cluster.namespace
    assert f"Deleted 'hist-a' from namespace '{ns}'" in said, said
    assert "Its history (state, logs, params) is kept in " in said, said
    assert "`%ktrain delete hist-a --history` removes it" in said, said
    # the other goes as --ttl or the operator's clean-up would take it: not through us
    got = test_cluster.kubectl("delete", "pytorchjob", "hist-b", "--wait=true")
    assert got.returncode == 0, got.stderr
    from .k8s_helpers import wait_for

    wait_for(lambda: not test_cluster.kubectl("get", "pods", "-l", "ktrain.io/job=hist-b",
                                              "-o", "name").stdout.strip(), timeout=60)  # fmt: skip
    for name in ("hist-a", "hist-b"):
        _gone(test_cluster, name)

    # a fresh kernel (a new backend, nothing in memory) answers from the job store
    shell = make_shell(test_cluster)
    capsys.readouterr()  # its %ktrain config
    assert shell.run_cell("%ktrain status hist-a").success
    status = _out(capsys)
    assert status.startswith("hist-a on kubernetes: Succeeded"), status
    assert "its objects are gone: this is its history" in status, status
    assert "hist-a-worker-0: Succeeded exit 0" in status, status  # the replicas it ended with
    assert shell.run_cell("%ktrain logs hist-a").success
    logs = _out(capsys)
    for rank in (0, 1):
        assert f"rank {rank} at step 11" in logs, logs
        assert logs.count(f"rank {rank} at step 0\n") == 1, logs  # once, not once per copy
    assert shell.run_cell("%ktrain logs hist-b --rank 0").success
    assert "rank 0 at step 11" in _out(capsys)
    assert shell.run_cell("%ktrain list").success
    listed = _out(capsys)
    assert re.search(r"hist-a\s.*Succeeded", listed), listed
    assert re.search(r"hist-b\s.*Succeeded", listed), listed
    assert shell.run_cell("%ktrain compare hist-a hist-b").success
    rows = {line.split()[0]: line.split()[1:] for line in _out(capsys).splitlines() if line.strip()}
    assert rows["loss"][-2:] == ["0.1", "0.2"], rows  # the last step's loss: LR * 1
    assert rows["const.LR"] == ["0.1", "0.2"], rows
    assert rows["nodes"] == ["2", "1"], rows

    # the side panel's server: the list marks them deleted, their tabs read from history
    from jupyter_ktrain.backends.registry import get_backend
    from jupyter_ktrain.server.core import PanelCore

    core = PanelCore({"kubernetes": lambda: get_backend("kubernetes")})
    rows = {j["name"]: j for j in core.jobs()["jobs"]}
    for name in ("hist-a", "hist-b"):
        assert (rows[name]["state"], rows[name]["history"]) == ("Succeeded", True), rows
    detail = core.job("hist-b")
    assert [r["name"] for r in detail["replicas"]] == ["hist-b-master-0"], detail
    assert detail["terminal"] is True
    lines = [line["text"] for line in core.logs("hist-b")["lines"]]
    assert "rank 0 at step 11" in lines, lines
    panels = {p["name"]: p for p in core.metrics("hist-a")["panels"]}
    assert len(panels["loss"]["traces"]) == 2, panels  # rank 0's and rank 1's
    compared = core.compare(["hist-a", "hist-b"])
    assert {c["job"]: c["last"] for c in compared["curves"]} == pytest.approx(
        {"hist-a": 0.1, "hist-b": 0.2}
    )

    # --history removes it; then the job is unknown
    assert shell.run_cell("%ktrain delete hist-a --history").success
    said = _out(capsys)
    assert f"'hist-a' has no objects left in namespace '{ns}'" in said, said
    assert "history/kubernetes/hist-a" in said, said
    result = shell.run_cell("%ktrain status hist-a")
    assert "No ktrain job named 'hist-a'" in str(result.error_in_exec), result.error_in_exec
    shell.reset(new_session=True)
