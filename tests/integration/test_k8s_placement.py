"""Topology-aware placement with the real Kueue (its TAS scheduler and ungater), the real
kube-scheduler and the Training Operator: nodes labelled by block, rack and host, a Topology, a
ResourceFlavor naming it and a ClusterQueue, as Kueue's TAS guide sets them up. A 2x2 job with
``--topology rack`` lands in one rack; a second one that no rack has room for waits with
Kueue's reason in the cell and the panel, and runs in the rack the first gives back."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from IPython.core.error import UsageError

from jupyter_ktrain.backends.registry import get_backend
from jupyter_ktrain.errors import JobNotFound

from ..cluster.cluster import Node
from ..cluster.pytest_plugin import TAS_NODE_LABEL
from .k8s_helpers import configured_shell, panel_listing, wait_for

pytestmark = pytest.mark.slow

BLOCK, RACK, HOST = "example.com/block", "example.com/rack", "kubernetes.io/hostname"
# 2 pods of 2 CPUs: rack r1 (two 2-CPU nodes) holds one such job; rack r2 (one node) none
JOB = "--nodes 2 --procs-per-node 2 --image local/python --cpu 2 --kueue-queue tas"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def _nodes(namespace: str) -> list[Node]:
    racks = {"r1-a": "r1", "r1-b": "r1", "r2-a": "r2"}
    return [
        Node(name, cpu="2", labels={BLOCK: "b1", RACK: rack, TAS_NODE_LABEL: namespace})
        for name, rack in racks.items()
    ]


def _status(name: str) -> Any:
    try:
        return get_backend("kubernetes").attach(name).status()
    except JobNotFound:
        return None


def _landed(test_cluster: Any, job: str) -> tuple[set[str], set[str]]:
    """(the nodes of the job's Workload topology assignment, those its pods were bound to).
    Kueue writes the lowest level only when the Topology has the host level (its nodes)."""
    got = test_cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-o", "json")
    (wl,) = [
        w
        for w in json.loads(got.stdout)["items"]
        if w["metadata"]["ownerReferences"][0]["name"] == job
    ]
    for ps in wl["spec"]["podSets"]:  # what Kueue read from the job: one rack, as a group
        assert ps["topologyRequest"]["required"] == RACK, ps
        assert ps["topologyRequest"]["podSetGroupName"] == "collective", ps
    hosts = set()
    for psa in wl["status"]["admission"]["podSetAssignments"]:
        ta = psa["topologyAssignment"]
        at = ta["levels"].index(HOST)
        for sl in ta["slices"]:
            value = sl["valuesPerLevel"][at]
            if "universal" in value:
                hosts.add(value["universal"])
            else:
                ind = value["individual"]
                pre, suf = ind.get("prefix", ""), ind.get("suffix", "")
                hosts |= {f"{pre}{root}{suf}" for root in ind["roots"]}
    pods = test_cluster.kubectl(
        "get", "pods", "-l", f"training.kubeflow.org/job-name={job}", "-o", "json"
    )
    nodes = {p["spec"].get("nodeName", "") for p in json.loads(pods.stdout)["items"]}
    return hosts, nodes


def _racks(test_cluster: Any, nodes: set[str]) -> set[str]:
    got = json.loads(test_cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return {n["metadata"]["labels"][RACK] for n in got if n["metadata"]["name"] in nodes}


def test_a_job_lands_in_one_rack_and_one_that_fits_no_rack_waits_with_the_reason(
    k8s_shell, test_cluster, capsys
):
    test_cluster.set_nodes(_nodes(test_cluster.namespace))
    test_cluster.kueue_queue("tas", cpu="16", topology=(BLOCK, RACK, HOST))
    # a level the queue's Topology does not have: one line, before anything is created
    with pytest.raises(UsageError) as refused:
        k8s_shell.run_cell_magic("ktrain", f"{JOB} --topology zone --name nowhere", "x = 1\n")
    (line,) = [ln for ln in str(refused.value).splitlines() if "--topology" in ln]
    assert "--topology zone: no level of LocalQueue 'tas'" in line, line
    assert f"{BLOCK}, {RACK}, {HOST}" in line, line
    made = test_cluster.kubectl("get", "pytorchjobs,configmaps", "-l", "ktrain.io/job=nowhere")
    assert made.stdout.strip() == "", made.stdout
    # the level by its last part: checked against the queue's Topology, written in full
    k8s_shell.run_cell_magic(
        "ktrain", f"{JOB} --topology rack --name first --detach", "steps(20, 0.2)\n"
    )
    first = wait_for(lambda: (s := _status("first")) and s.state == "Running" and s, 90)
    assigned, nodes = _landed(test_cluster, "first")
    assert assigned == nodes == {"r1-a", "r1-b"}, (assigned, nodes)  # a pod on each r1 node
    assert _racks(test_cluster, nodes) == {"r1"}  # the only rack with room for both pods
    assert "placed by Kueue: " in first.message, first
    assert "hostname=r1-a" in first.message, first
    assert "hostname=r1-b" in first.message, first
    capsys.readouterr()

    with panel_listing("second") as listed:
        k8s_shell.run_cell_magic("ktrain", f"{JOB} --topology rack --name second", "steps(2, 0)\n")
    out = capsys.readouterr().out
    queued = [line for line in out.splitlines() if "second: Queued" in line]
    # Kueue's own reason: no domain of the level has room for a pod set (its words name the pod
    # set it tried, master or worker: either may be the one that did not fit, the Topology,
    # and how many of the pods fit)
    fit = re.compile(r"couldn't assign flavors to pod set (master|worker): topology \"")
    assert any(fit.search(line) and "allows to fit only" in line for line in queued), out
    assert any(s == "Queued" and "allows to fit only" in m for s, m in listed), listed
    # it ran once the first job gave its rack back, in that rack
    assert "admitted by Kueue to ClusterQueue" in out, out
    assert "hostname=r1-a" in out, out
    assert any("placed by Kueue" in m and "hostname=r1-b" in m for _s, m in listed), listed
    assigned, nodes = _landed(test_cluster, "second")
    assert assigned == nodes == {"r1-a", "r1-b"}, (assigned, nodes)
    done = _status("first")
    assert done is not None
    assert done.state == "Succeeded", done


def test_a_trainjob_asks_through_its_runtime_patch_and_lands_in_one_rack(
    k8s_shell, test_cluster, capsys
):
    """Kueue reads a TrainJob's pod sets from the JobSet its runtime and patches make: the
    annotation in ktrain's runtime patch reaches the node pod set."""
    test_cluster.set_nodes(_nodes(test_cluster.namespace))
    test_cluster.kueue_queue("tas", cpu="16", topology=(BLOCK, RACK, HOST))
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind TrainJob --runtime torch-distributed {JOB} --topology rack --name tj",
        "steps(2, 0)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "placed: node: 1 pod on hostname=r1-" in out, out
    got = json.loads(test_cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-o", "json").stdout)
    (wl,) = got["items"]
    (ps,) = wl["spec"]["podSets"]  # the annotation in ktrain's runtime patch reached Kueue
    assert ps["topologyRequest"]["required"] == RACK, ps
    (psa,) = wl["status"]["admission"]["podSetAssignments"]
    assert psa["name"] == "node", psa
    (sl,) = psa["topologyAssignment"]["slices"]
    assert sorted(sl["valuesPerLevel"][-1]["individual"]["roots"]) == ["a", "b"], sl  # r1-a, r1-b
    pods = json.loads(test_cluster.kubectl("get", "pods", "-o", "json").stdout)["items"]
    nodes = {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("tj-node-")}
    assert nodes == {"r1-a", "r1-b"}, nodes
