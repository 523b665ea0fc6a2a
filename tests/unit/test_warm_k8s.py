"""A warm PyTorchJob's objects, how a run is ordered through its ConfigMap, how a pod fills its
run folder from that ConfigMap (its mount, at start), and how runs are read back from the pods'
lines. The signed deliveries are tests/unit/test_warm_deliver.py's."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_ktrain.backends.kubernetes.labels import SHAPE_ANNOTATION
from jupyter_ktrain.backends.kubernetes.plans.plan import describe, render_request
from jupyter_ktrain.backends.kubernetes.warm.orders import (
    RunBook,
    control_of,
    order_run,
    warm_port,
    with_control,
)
from jupyter_ktrain.capture import capture
from jupyter_ktrain.jobs import JobStatus
from jupyter_ktrain.packaging.configmap import render_code_configmap
from jupyter_ktrain.pod.agent.mirror import CONTROL_KEY, CONTROL_PATH, apply, folder_seq, seed
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
from jupyter_ktrain.spec.job import JobSpec


def _objects(**values: object) -> dict[str, dict]:  # type: ignore[type-arg]
    spec = JobSpec.create(
        name="w", backend="kubernetes", image="img", nodes=2, procs_per_node=2, warm=True,
        namespace="ns", **values,
    )  # fmt: skip
    program = capture("x = 1\n", {}, [], {})
    request, _files = render_request(spec, program, registry="reg/code", service_monitor=False)
    return {o["kind"]: dict(o) for o in request.objects}  # type: ignore[misc]


def test_a_warm_job_brings_a_key_and_no_account_and_its_pods_get_no_token() -> None:
    objs = _objects()
    assert list(objs) == ["ConfigMap", "Secret", "PyTorchJob"]  # no ServiceAccount, no Role
    key = objs["Secret"]["stringData"]["key"]
    assert objs["Secret"]["metadata"]["name"] == "w-warm"
    assert len(key) == 64
    assert int(key, 16) >= 0
    assert key != _objects()["Secret"]["stringData"]["key"]  # a new one per job
    assert control_of(objs["ConfigMap"])["run"] == 1  # the registry is not used: runs travel here
    job = objs["PyTorchJob"]
    assert json.loads(job["metadata"]["annotations"][SHAPE_ANNOTATION])["nodes"] == 2
    assert job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 5
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "serviceAccountName" not in pod
    assert pod["automountServiceAccountToken"] is False
    container = pod["containers"][0]
    assert container["command"] == ["python", "-m", "jupyter_ktrain.pod.agent.warm"]
    env = {e["name"]: e.get("value") or e.get("valueFrom") for e in container["env"]}
    assert (env["KTRAIN_WARM_CONFIGMAP"], env["KTRAIN_WARM_CONTROL"]) == ("w-code", "/ktrain-warm")
    assert env["KTRAIN_WARM_KEY"] == {"secretKeyRef": {"name": "w-warm", "key": "key"}}
    assert {"name": "ktrain-warm", "mountPath": "/ktrain-warm"} in container["volumeMounts"]
    # the order is a file of the code mount too: the pods start run 1 from it
    volume = next(v for v in pod["volumes"] if v["name"] == "ktrain-code")
    assert {"key": CONTROL_KEY, "path": CONTROL_PATH} in volume["configMap"]["items"]
    port = {"name": "pytorchjob-port", "containerPort": warm_port("w"), "protocol": "TCP"}
    assert port in container["ports"]
    assert 20000 <= warm_port("w") < 30000


def test_the_dry_run_never_shows_the_key() -> None:
    spec = JobSpec.create(
        name="w", backend="kubernetes", image="img", nodes=2, warm=True, namespace="ns"
    )
    request, _ = render_request(spec, capture("x = 1\n", {}, [], {}), registry=None,
                                service_monitor=False)  # fmt: skip
    secret = next(o for o in request.objects if o["kind"] == "Secret")
    text = describe(request)
    assert secret["stringData"]["key"] not in text  # type: ignore[index]
    assert "<made at submit, not shown>" in text


def test_pods_get_an_api_token_only_where_one_is_named_or_needed() -> None:
    with_account = _objects(scheduling={"service_account": "trainer"})["PyTorchJob"]
    pod = with_account["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer"
    assert "automountServiceAccountToken" not in pod
    spec = JobSpec.create(name="m", backend="kubernetes", image="img", kind="MPIJob", nodes=2)
    request, _ = render_request(spec, capture("x = 1\n", {}, [], {}), registry=None,
                                service_monitor=False)  # fmt: skip
    mpi = next(o for o in request.objects if o["kind"] == "MPIJob")
    replicas = mpi["spec"]["mpiReplicaSpecs"]  # type: ignore[index]
    # mpirun's `kubectl exec` needs the launcher's token (the operator's own account)
    assert "automountServiceAccountToken" not in replicas["Launcher"]["template"]["spec"]
    assert replicas["Worker"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_a_run_is_ordered_by_replacing_the_configmaps_data_and_its_order(tmp_path: Path) -> None:
    current = _objects()["ConfigMap"]
    current["metadata"]["resourceVersion"] = "42"
    fresh = render_code_configmap("w-code", "ns", {"program.py": b"print('run 2')\n"})
    body, run = order_run(current, fresh)
    assert run == 2
    assert body["metadata"]["resourceVersion"] == "42"  # a conflict, not a lost order
    assert (control_of(body)["run"], control_of(body)["seq"]) == (2, 2)
    assert json.loads(body["data"][CONTROL_KEY]) == control_of(body)
    # the pod rebuilds the run's files (not the runner library, not the order) and orders it
    assert apply(body, tmp_path) == 2
    code = tmp_path / "runs" / "2" / "code"
    assert (code / "program.py").read_text() == "print('run 2')\n"
    assert not (code / "lib").exists()
    assert not (code / CONTROL_PATH).exists()
    order = json.loads((tmp_path / "control.json").read_text())
    assert (order["run"], order["code_dir"], order["idle_limit_s"]) == (2, str(code), 900.0)
    aborted = with_control(body, {**control_of(body), "abort": {"2": "cancelled by the user"}})
    assert control_of(aborted)["seq"] == 3  # every change counts
    apply(aborted, tmp_path)
    assert (tmp_path / "runs" / "2" / "abort").read_text() == "cancelled by the user"


def _mount(root: Path, configmap: dict) -> Path:  # type: ignore[type-arg]
    """``configmap`` as the kubelet mounts it: files under ``..data``, linked from the top."""
    data = root / "..2026_01_01"
    table = dict(
        line.split("=", 1)
        for line in configmap["metadata"]["annotations"]["ktrain.jupyter.org/paths"].splitlines()
    )
    for key, text in configmap["data"].items():
        target = data / table[key]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (root / "..data").symlink_to(data.name)
    for top in {table[k].split("/")[0] for k in configmap["data"]}:
        (root / top).symlink_to(f"..data/{top}")
    return root


def test_a_fresh_pod_starts_run_1_from_its_mount_and_a_later_pod_joins_the_next(
    tmp_path: Path,
) -> None:
    first = _objects()["ConfigMap"]
    mount = _mount(tmp_path / "mount1", first)
    folder = tmp_path / "folder1"
    assert seed(folder, mount) == 1
    code = folder / "runs" / "1" / "code"
    assert (code / "program.py").read_text() == first["data"]["program.py"]
    assert not (code / "lib").exists()
    assert not (code / CONTROL_PATH).exists()
    assert json.loads((folder / "control.json").read_text())["run"] == 1
    assert seed(folder, mount) is None  # a restarted container: its folder has an order
    fresh = render_code_configmap("w-code", "ns", {"program.py": b"print('run 2')\n"})
    second, _run = order_run(first, fresh)
    later = tmp_path / "folder2"
    assert seed(later, _mount(tmp_path / "mount2", second)) == 2  # recorded, so not run again
    assert folder_seq(later) == (2, 2)


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


def test_a_runs_progress_is_read_from_its_ranks_records_as_a_jobs_is() -> None:
    """A cluster warm job's run has its progress (the widget's header, as on local)."""
    book = RunBook()
    book.feed("w-master-0", parse_line(_agent({TYPE: RUN, "run": 1, "node": 0, "t": 10.0})))
    for step in range(4):
        record = {TYPE: "metric", "rank": 0, "step": step, "total": 8, "t": 10.0 + step}
        book.feed("w-master-0", parse_line(format_rank_line(0, format_record(record))))
    p = book.status("w", 1, 1, JobStatus("w", "Running")).progress
    assert p is not None
    assert (p.head(), p.eta_s) == ("50% (4/8)", 4.0)
