"""A cell as a RayJob on the real KubeRay operator: a head and a worker; the program is the
driver (submitted by KubeRay's submitter pod, whose log is the driver's output), its tasks
spread over the Ray nodes and report from inside them; the driver's result comes back. The
test cluster runs it as a cluster does: each pod its own network (the workers bind the same
fixed ports) and address, Ready by KubeRay's own probes, KubeRay's submitter Job."""

from __future__ import annotations

import json

import pytest

from jupyter_ktrain.errors import JobFailed

pytest.importorskip("kubernetes")
pytest.importorskip("ray")

from tests.notebook_cells import RAY_CELL, reported

from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def _pod_networks(test_cluster):
    """Ray's nodes bind the same fixed ports: each pod needs its own network (as root)."""
    if test_cluster.cluster.kubelet.net is None:
        pytest.skip("the test cluster runs without a network per pod (needs root, ip, nsenter)")


def test_rayjob_cell_runs_its_tasks_on_the_ray_nodes(k8s_shell, test_cluster, capsys):
    assert k8s_shell.run_cell(RAY_CELL, store_history=True).success
    job = k8s_shell.run_cell_magic(
        "ktrain", "--kind RayJob --nodes 2 --image local/python --name ray", "hosts = spread(3)\n"
    )
    out = capsys.readouterr().out
    state = test_cluster.kubectl("get", "rayjob", "ray", "-o", "json").stdout
    assert job.state == "Succeeded", (out, state)
    hosts = k8s_shell.user_ns.get("hosts")
    assert hosts is not None, out  # the driver's result, from the submitter's log
    pods = json.loads(test_cluster.kubectl("get", "pods", "-o", "json").stdout)["items"]
    ray_pods = sorted(
        p["metadata"]["name"] for p in pods if "ray.io/node-type" in p["metadata"]["labels"]
    )
    assert len(set(hosts)) >= 2, (hosts, out)  # the tasks ran on more than one Ray node
    assert set(hosts) <= set(ray_pods), (hosts, ray_pods)
    # the test cluster runs KubeRay as a cluster does: a head and a worker, each pod its
    # own address and Ready by KubeRay's own probes, and KubeRay's submitter Job ran the driver
    ray = [p for p in pods if p["metadata"]["name"] in ray_pods]
    types = sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in ray)
    assert types == ["head", "worker"], types
    assert all(p["status"]["containerStatuses"][0]["ready"] for p in ray), ray_pods
    assert len({p["status"]["podIP"] for p in ray}) == 2, [p["status"] for p in ray]
    assert any("job-name" in p["metadata"]["labels"] for p in pods), [p["metadata"] for p in pods]
    for i in range(3):
        assert f"task {i} on " in out, out  # each task's line, forwarded by Ray to the driver
    assert "Ray dashboard: http://ray-" in out, out  # the head Service's dashboard, as KubeRay says
    # a report from inside a task is the driver's record (Ray's prefix read through)
    values = sorted(v for vs in reported(job, "task").values() for v in vs)
    assert values == [0.0, 1.0, 2.0], (values, out)


def test_a_task_that_raises_fails_the_cell_with_its_traceback(k8s_shell, capsys):
    assert k8s_shell.run_cell(RAY_CELL, store_history=True).success
    with pytest.raises(JobFailed) as info:
        k8s_shell.run_cell_magic(
            "ktrain", "--kind RayJob --nodes 1 --image local/python --name ray-bad", "failing()\n"
        )
    error, out = str(info.value), capsys.readouterr().out
    assert "RayTaskError(ValueError)" in error, (error, out)
    assert "ValueError: shard 3 is empty" in error, (error, out)  # the task's own traceback
