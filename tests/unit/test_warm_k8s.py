"""A warm PyTorchJob's objects, how a run is ordered through its ConfigMap, how the pod mirrors
that ConfigMap into its run folder, and how runs are read back from the pods' lines."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_ktrain.backends.base import JobStatus
from jupyter_ktrain.backends.kubernetes.plan import render_request
from jupyter_ktrain.backends.kubernetes.warm import (
    SHAPE_ANNOTATION,
    RunBook,
    control_of,
    order_run,
    warm_port,
)
from jupyter_ktrain.capture import capture
from jupyter_ktrain.packaging.configmap import render_code_configmap
from jupyter_ktrain.pod.agent.mirror import apply
from jupyter_ktrain.pod.protocol import (
    EXIT,
    RUN,
    RUN_END,
    TYPE,
    format_agent_line,
    format_rank_line,
    format_record,
    parse_line,
)
from jupyter_ktrain.spec import JobSpec


def _objects(**values: object) -> dict[str, dict]:  # type: ignore[type-arg]
    spec = JobSpec.create(
        name="w", backend="kubernetes", image="img", nodes=2, procs_per_node=2, warm=True,
        namespace="ns", **values,
    )  # fmt: skip
    program = capture("x = 1\n", {}, [], {})
    request, _files = render_request(spec, program, registry="reg/code", service_monitor=False)
    return {o["kind"]: dict(o) for o in request.objects}  # type: ignore[misc]


def test_a_warm_job_brings_its_own_account_allowed_to_read_its_configmap_only() -> None:
    objs = _objects()
    assert list(objs) == ["ConfigMap", "ServiceAccount", "Role", "RoleBinding", "PyTorchJob"]
    assert objs["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["w-code"],
         "verbs": ["get", "watch"]}
    ]  # fmt: skip
    assert objs["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "w-warm", "namespace": "ns"}
    ]
    assert control_of(objs["ConfigMap"])["run"] == 1  # the registry is not used: runs travel here
    job = objs["PyTorchJob"]
    assert json.loads(job["metadata"]["annotations"][SHAPE_ANNOTATION])["nodes"] == 2
    assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 5
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["serviceAccountName"] == "w-warm"
    container = pod["containers"][0]
    assert container["command"] == ["python", "-m", "jupyter_ktrain.pod.agent.warm"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["KTRAIN_WARM_CONFIGMAP"], env["KTRAIN_WARM_CONTROL"]) == ("w-code", "/ktrain-warm")
    assert {"name": "ktrain-warm", "mountPath": "/ktrain-warm"} in container["volumeMounts"]
    port = {"name": "pytorchjob-port", "containerPort": warm_port("w"), "protocol": "TCP"}
    assert port in container["ports"]
    assert 20000 <= warm_port("w") < 30000


def test_a_run_is_ordered_by_replacing_the_configmaps_data_and_its_order(tmp_path: Path) -> None:
    current = _objects()["ConfigMap"]
    current["metadata"]["resourceVersion"] = "42"
    fresh = render_code_configmap("w-code", "ns", {"program.py": b"print('run 2')\n"})
    body, run = order_run(current, fresh)
    assert run == 2
    assert body["metadata"]["resourceVersion"] == "42"  # a conflict, not a lost order
    assert control_of(body)["run"] == 2
    # the pod's mirror rebuilds the run's files (not the runner library) and orders it
    assert apply(body, tmp_path) == 2
    code = tmp_path / "runs" / "2" / "code"
    assert (code / "program.py").read_text() == "print('run 2')\n"
    assert not (code / "lib").exists()
    order = json.loads((tmp_path / "control.json").read_text())
    assert (order["run"], order["code_dir"], order["idle_limit_s"]) == (2, str(code), 900.0)
    body["metadata"]["annotations"]["ktrain.io/warm-control"] = json.dumps(
        {**control_of(body), "abort": {"2": "cancelled by the user"}}
    )
    apply(body, tmp_path)
    assert (tmp_path / "runs" / "2" / "abort").read_text() == "cancelled by the user"


def _agent(record: dict) -> str:  # type: ignore[type-arg]
    return format_agent_line(format_record(record))


def test_runs_are_read_back_from_the_agents_records() -> None:
    book = RunBook()
    job = JobStatus("w", "Running")
    lines = {
        "w-master-0": [
            _agent({TYPE: RUN, "run": 2, "node": 0, "t": 10.0}),
            format_rank_line(1, format_record({TYPE: EXIT, "rank": 1, "code": 1})),
            _agent({TYPE: RUN_END, "run": 2, "node": 0, "code": 1, "why": "rank 1 failed",
                    "ranks": {"0": 143, "1": 1}, "aborted": "", "t": 11.0}),
        ],
        "w-worker-0": [_agent({TYPE: RUN, "run": 2, "node": 1, "t": 10.0})],
    }  # fmt: skip
    for pod, raws in lines.items():
        for raw in raws:
            book.feed(pod, parse_line(raw))
    going = book.status("w", 2, 2, job)
    assert (going.state, going.failed_rank) == ("Running", 1)
    assert book.failed_nodes(2) == [0]
    ranks = {"2": 143, "3": 143}
    end = _agent({TYPE: RUN_END, "run": 2, "node": 1, "code": 143, "why": "",
                  "ranks": ranks, "aborted": "node 0 failed", "t": 12.0})  # fmt: skip
    book.feed("w-worker-0", parse_line(end))
    book.feed("w-worker-0", parse_line(end))  # a stream read again changes nothing
    done = book.status("w", 2, 2, job)
    assert (done.state, done.reason, done.failed_rank) == ("Failed", "RankFailed", 1)
    assert done.exit_codes == {0: 143, 1: 1, 2: 143, 3: 143}
    assert book.last_end() == (2, 12.0, False)
    assert book.status("w", 3, 2, job).state == "Pending"
