"""Topology-aware placement through Kueue: the annotations each kind gets, the one-line
refusals before anything is created, the level checked against the queue's Topology, and where
the job landed read back from its Workload."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_ktrain.backends.kubernetes.client.kube_api import Api as RealApi
from jupyter_ktrain.backends.kubernetes.client.retries import ApiFailure, api_failure
from jupyter_ktrain.backends.kubernetes.plans.manifests import render
from jupyter_ktrain.backends.kubernetes.plans.placement import (
    GROUP_ANNOTATION,
    PREFERRED_ANNOTATION,
    REQUIRED_ANNOTATION,
    assigned_domains,
    describe_domains,
)
from jupyter_ktrain.backends.kubernetes.plans.topology_check import check_topology
from jupyter_ktrain.errors import PreflightError, SpecError
from jupyter_ktrain.flags import parse_flags, spec_from_args

RACK = "example.com/rack"
QUEUED = "--kueue-queue team-a --image local/python"


def _job(flags: str) -> dict[str, Any]:
    spec = spec_from_args(parse_flags(flags))
    (job,) = [o for o in render(spec).objects if o["kind"] not in ("ConfigMap",)]
    return job


def _notes(template: dict[str, Any]) -> dict[str, str]:
    return dict(template["metadata"].get("annotations") or {})


def test_a_pytorchjobs_master_and_workers_ask_for_one_rack_together() -> None:
    job = _job(f"--nodes 3 {QUEUED} --topology {RACK}")
    for rtype in ("Master", "Worker"):
        notes = _notes(job["spec"]["pytorchReplicaSpecs"][rtype]["template"])
        assert notes[REQUIRED_ANNOTATION] == RACK
        assert notes[GROUP_ANNOTATION] == "collective"  # one domain for both pod sets
        assert PREFERRED_ANNOTATION not in notes
    elastic = _job(f"--nodes 2 --elastic 2:2 {QUEUED} --topology-preferred {RACK}")
    notes = _notes(elastic["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    assert notes[PREFERRED_ANNOTATION] == RACK
    assert GROUP_ANNOTATION not in notes  # one pod set: nothing to group


def test_a_trainjob_asks_through_its_runtime_patch_and_a_rayjob_for_head_and_workers() -> None:
    tj = _job(f"--kind TrainJob --nodes 2 {QUEUED} --topology {RACK}")
    (patch,) = tj["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]
    assert _notes(pod)[REQUIRED_ANNOTATION] == RACK
    ray = _job(f"--kind RayJob --nodes 3 {QUEUED} --topology {RACK}")
    cluster = ray["spec"]["rayClusterSpec"]
    for template in (cluster["headGroupSpec"]["template"],
                     cluster["workerGroupSpecs"][0]["template"]):  # fmt: skip
        assert _notes(template)[REQUIRED_ANNOTATION] == RACK
        assert _notes(template)[GROUP_ANNOTATION] == "collective"
    # the submitter pod (ray job submit) takes no part in the collective
    assert REQUIRED_ANNOTATION not in _notes(ray["spec"]["submitterPodTemplate"])


def test_a_job_without_topology_has_no_kueue_placement_annotation() -> None:
    job = _job(f"--nodes 2 {QUEUED}")
    for rtype in ("Master", "Worker"):
        notes = _notes(job["spec"]["pytorchReplicaSpecs"][rtype]["template"])
        assert not {REQUIRED_ANNOTATION, PREFERRED_ANNOTATION, GROUP_ANNOTATION} & set(notes)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("--kind MPIJob --nodes 2 --topology rack", "--topology: Kueue does not place MPIJob"),
        (f"--nodes 2 {QUEUED} --topology rack --topology-preferred rack", "keep one"),
        (f"--nodes 2 {QUEUED} --topology 'rack level'", "is not a topology level"),
    ],
)
def test_placement_that_cannot_apply_is_refused_in_one_line(flags: str, said: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_args(parse_flags(flags))
    assert said in str(info.value)
    assert "\n" not in str(info.value)


class Api:
    """The cluster's Kueue objects as a notebook user reads them (``None``: forbidden)."""

    def __init__(self, objects: dict[str, dict[str, Any] | None]) -> None:
        self.objects = objects

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        for suffix, obj in self.objects.items():
            if path.endswith(suffix):
                if obj is None:
                    raise api_failure("forbidden", status=403)  # as the client raises it
                return obj
        raise ApiFailure("not found", status=404)

    find = RealApi.find  # the client's verb, as the real client has it over this get


def _cluster(levels: list[str], topology: str = "tas") -> Api:
    return Api({
        "/localqueues/team-a": {"spec": {"clusterQueue": "cq"}},
        "/clusterqueues/cq": {"spec": {"resourceGroups": [{"flavors": [{"name": "gpu"}]}]}},
        "/resourceflavors/gpu": {"spec": {"topologyName": topology} if topology else {}},
        "/topologies/tas": {"spec": {"levels": [{"nodeLabel": lv} for lv in levels]}},
    })  # fmt: skip


def _spec(flags: str) -> Any:
    return spec_from_args(parse_flags(f"--nodes 2 {flags}"))


def test_the_level_is_read_from_the_queues_topology_by_its_label_or_its_last_part() -> None:
    api = _cluster(["example.com/block", RACK, "kubernetes.io/hostname"])
    spec, notes = check_topology(api, _spec(f"{QUEUED} --topology rack"))
    assert spec.scheduling.topology == RACK
    assert notes == ()
    spec, _ = check_topology(api, _spec(f"{QUEUED} --topology-preferred {RACK}"))
    assert spec.scheduling.topology_preferred == RACK
    with pytest.raises(PreflightError) as info:
        check_topology(api, _spec(f"{QUEUED} --topology zone"))
    (line,) = info.value.problems
    assert "no level of LocalQueue 'team-a' (ClusterQueue 'cq') is 'zone'" in line
    assert f"example.com/block, {RACK}, kubernetes.io/hostname" in line


def test_a_queue_without_a_topology_or_without_a_queue_is_refused_before_anything_is_made():
    with pytest.raises(PreflightError) as info:
        check_topology(_cluster([], topology=""), _spec(f"{QUEUED} --topology rack"))
    assert "name no Kueue Topology" in info.value.problems[0]
    with pytest.raises(SpecError) as no_queue:
        check_topology(None, _spec("--image local/python --topology rack"))
    assert "needs a Kueue queue: add --kueue-queue QUEUE" in str(no_queue.value)


def test_a_topology_the_user_may_not_read_is_kept_as_written_with_a_note() -> None:
    api = Api({"/localqueues/team-a": {"spec": {"clusterQueue": "cq"}}, "/clusterqueues/cq": None})
    spec, notes = check_topology(api, _spec(f"{QUEUED} --topology rack"))
    assert spec.scheduling.topology == "rack"
    assert "not checked" in notes[0]


# the shape Kueue v0.17 writes (kueue.x-k8s.io/v1beta2): one slice per pod set, the levels'
# values universal where every domain shares them, individual (roots) where they differ
ADMITTED = {
    "status": {
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "master",
                    "count": 1,
                    "topologyAssignment": {
                        "levels": [RACK, "kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": 1,
                                "podCounts": {"universal": 1},
                                "valuesPerLevel": [
                                    {"universal": "r2"},
                                    {"individual": {"prefix": "n-", "roots": ["r2-a"]}},
                                ],
                            }
                        ],
                    },
                },
                {
                    "name": "worker",
                    "count": 3,
                    "topologyAssignment": {
                        "levels": [RACK, "kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": 2,
                                "podCounts": {"individual": [1, 2]},
                                "valuesPerLevel": [
                                    {"universal": "r2"},
                                    {"individual": {"prefix": "n-", "roots": ["r2-a", "r2-b"]}},
                                ],
                            }
                        ],
                    },
                },
            ],
        }
    }
}


def test_where_the_job_landed_is_read_from_the_workloads_topology_assignment() -> None:
    got = assigned_domains(ADMITTED)
    host = "kubernetes.io/hostname"
    assert got == [
        ("master", {RACK: "r2", host: "n-r2-a"}, 1),
        ("worker", {RACK: "r2", host: "n-r2-a"}, 1),
        ("worker", {RACK: "r2", host: "n-r2-b"}, 2),
    ]
    assert describe_domains(got) == (
        "master: 1 pod on rack=r2 hostname=n-r2-a; worker: 1 pod on rack=r2 hostname=n-r2-a; "
        "worker: 2 pods on rack=r2 hostname=n-r2-b"
    )
    assert assigned_domains({"status": {"admission": {"podSetAssignments": [{}]}}}) == []


def test_a_configured_topology_is_every_queued_jobs_unless_it_names_one(
    monkeypatch, tmp_path, capsys
):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path))
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    sh.run_line_magic("ktrain", f"config topology={RACK}")
    base = "--backend kubernetes --nodes 2 --image local/python --dry-run"

    def master(flags: str) -> dict[str, str]:
        job = sh.run_cell_magic("ktrain", f"{base} {flags}", "print(1)")
        (obj,) = [o for o in job.plan.request.objects if o["kind"] != "ConfigMap"]
        return _notes(obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"])

    assert master("--kueue-queue team-a")[REQUIRED_ANNOTATION] == RACK
    got = master(f"--kueue-queue team-a --topology-preferred {RACK}")  # the flag wins
    assert got[PREFERRED_ANNOTATION] == RACK
    assert REQUIRED_ANNOTATION not in got
    assert REQUIRED_ANNOTATION not in master("")  # no queue: Kueue places nothing
    capsys.readouterr()
    sh.reset(new_session=True)
