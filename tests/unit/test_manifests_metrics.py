"""``--metrics-port`` on Kubernetes: the agent gets its port, the job a headless Service over
the pods that run the agent, and a ServiceMonitor where the Prometheus operator's API is
served (found by discovery). Rendered objects pass the Kubernetes Service schema and the
ServiceMonitor checks; RBAC asks for what is created."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_ktrain.backends.kubernetes.client.kube_api import Api as RealApi
from jupyter_ktrain.backends.kubernetes.client.retries import ApiFailure
from jupyter_ktrain.backends.kubernetes.plans.manifests import render
from jupyter_ktrain.backends.kubernetes.plans.preflight import (
    required_access,
    serves_service_monitors,
)
from jupyter_ktrain.backends.kubernetes.plans.validate import validate_objects
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.flags import parse_flags, spec_from_args
from jupyter_ktrain.spec.job import JobSpec


def _spec(flags: str) -> JobSpec:
    return spec_from_args(parse_flags(f"--backend kubernetes --image img --namespace ml {flags}"))


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "TrainJob":
        return [obj["spec"]["trainer"]]
    replicas = next(v for k, v in obj["spec"].items() if k.endswith("ReplicaSpecs"))
    return [r["template"]["spec"]["containers"][0] for r in replicas.values()]


@pytest.mark.parametrize(
    ("kind", "selector"),
    [
        ("PyTorchJob", {"training.kubeflow.org/job-name": "ft"}),
        ("TFJob", {"training.kubeflow.org/job-name": "ft"}),
        (
            "MPIJob",
            {
                "training.kubeflow.org/job-name": "ft",
                "training.kubeflow.org/replica-type": "launcher",
            },
        ),
        ("TrainJob", {"jobset.sigs.k8s.io/jobset-name": "ft"}),
    ],
)
def test_metrics_port_renders_a_service_over_the_agents(
    kind: str, selector: dict[str, str]
) -> None:
    spec = _spec(f"--kind {kind} --name ft --nodes 2 --gpus-per-node 8 --metrics-port 9400")
    objects = render(spec).objects
    assert [o["kind"] for o in objects] == ["Service", kind]  # the job last: it owns the rest
    validate_objects(objects)
    service = objects[0]
    assert service["metadata"]["name"] == "ft-metrics"
    assert service["metadata"]["namespace"] == "ml"
    assert service["spec"]["selector"] == selector
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": 9400, "protocol": "TCP"}
    ]
    for container in _containers(objects[-1]):
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert (env["KTRAIN_METRICS_PORT"], env["KTRAIN_JOB_NAME"]) == ("9400", "ft")
    if kind == "PyTorchJob":
        for container in _containers(objects[-1]):
            assert container["ports"] == [
                {"name": "metrics", "containerPort": 9400, "protocol": "TCP"}
            ]
    if kind == "MPIJob":  # workers run sshd, the launcher runs the agent
        ports = [c.get("ports") for c in _containers(objects[-1])]
        assert ports == [[{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}], None]


def test_a_service_monitor_scrapes_the_service_keeping_the_job_label() -> None:
    spec = _spec("--name ft --nodes 4 --metrics-port 9400 --label release=prom")
    objects = render(spec, service_monitor=True).objects
    assert [o["kind"] for o in objects] == ["Service", "ServiceMonitor", "PyTorchJob"]
    validate_objects(objects)
    service, monitor = objects[0], objects[1]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"  # what Prometheus selects on
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}
    ]
    # a monitor that selects nothing is caught before the cluster sees it
    monitor["spec"]["selector"]["matchLabels"] = {"ktrain.io/job": "other"}
    with pytest.raises(SpecError, match="selects none of the Services"):
        validate_objects(objects)


def test_no_metrics_port_renders_no_metrics_objects_and_a_bad_port_is_refused() -> None:
    objects = render(_spec("--name ft")).objects
    assert [o["kind"] for o in objects] == ["PyTorchJob"]
    assert "ports" not in _containers(objects[0])[0]
    with pytest.raises(SpecError, match="--metrics-port must be a TCP port from 1024"):
        _spec("--name ft --metrics-port 80")


class _Discovery:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.paths: list[str] = []

    def get(self, path: str, query: Any = None) -> Any:
        self.paths.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    find = RealApi.find  # the client's verb, as the real client has it over this get


def test_service_monitors_are_found_by_discovery() -> None:
    served = {"resources": [{"name": "podmonitors"}, {"name": "servicemonitors"}]}
    api = _Discovery(served)
    assert serves_service_monitors(api)  # type: ignore[arg-type]
    assert api.paths == ["/apis/monitoring.coreos.com/v1"]
    assert not serves_service_monitors(_Discovery(ApiFailure("nf", status=404)))  # type: ignore[arg-type]
    assert not serves_service_monitors(_Discovery({"resources": [{"name": "probes"}]}))  # type: ignore[arg-type]


def test_preflight_asks_rbac_for_the_metrics_objects() -> None:
    spec = _spec("--name ft --metrics-port 9400")
    verbs = {a.describe() for a in required_access(spec, False, service=True, service_monitor=True)}
    assert {"create services", "patch services", "create servicemonitors.monitoring.coreos.com",
            "patch servicemonitors.monitoring.coreos.com"} <= verbs  # fmt: skip
    plain = {a.describe() for a in required_access(spec, False)}
    assert not any("service" in v for v in plain)


def test_offline_dry_run_shows_the_service_and_says_why_no_monitor(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    assert sh.run_cell("def train():\n    return 1", store_history=True).success
    flags = "--backend kubernetes --image img --nodes 2 --metrics-port 9400 --dry-run"
    job = sh.run_cell_magic("ktrain", flags, "train()")
    out = capsys.readouterr().out
    sh.reset(new_session=True)
    assert [o["kind"] for o in job.plan.request.objects] == [
        "ConfigMap",
        "Service",
        "PyTorchJob",
    ]
    assert "no ServiceMonitor rendered: it is added when the cluster serves it" in out
    assert "name: metrics" in out


def test_ktrain_render_writes_the_monitor_for_git(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from jupyter_ktrain.frontends.cli_render import render_main

    argv = ["--name", "ft", "--image", "img", "--metrics-port", "9400", "--service-monitor"]
    assert render_main(argv) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Service", "ServiceMonitor", "PyTorchJob"]
    assert render_main(["--name", "ft", "--image", "img", "--service-monitor"]) == 2
    assert "add it" in capsys.readouterr().err


class _RecordingApi:
    """What the backend asks of the API server when it creates a job's objects: each POST is
    answered with the object and a uid, like the server does."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, query: Any = None, body: Any = None,
                content_type: str = "application/json", retry: bool = True) -> Any:  # fmt: skip
        self.calls.append((method, path, body))
        if method == "POST":
            return {**body, "metadata": {**body["metadata"], "uid": f"uid-{len(self.calls)}"}}
        return {}

    # the client's verbs, as the real client has them over this request
    create = RealApi.create
    patch = RealApi.patch


def test_the_job_creates_and_owns_its_metrics_objects_at_their_api_paths() -> None:
    from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
    from jupyter_ktrain.backends.kubernetes.objects import create, own
    from jupyter_ktrain.config import Config

    api = _RecordingApi()
    backend = KubernetesBackend(Config(namespace="ml"), api=api)  # type: ignore[arg-type]
    objects = render(_spec("--name ft --metrics-port 9400"), service_monitor=True).objects
    made = [create(backend.cluster, o, "ml") for o in objects]
    created = [(o["kind"], o["metadata"]["name"]) for o in objects[:-1]]
    own(backend.cluster, made[-1], created, "ml")
    assert [(m, p) for m, p, _ in api.calls] == [
        ("POST", "/api/v1/namespaces/ml/services"),
        ("POST", "/apis/monitoring.coreos.com/v1/namespaces/ml/servicemonitors"),
        ("POST", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs"),
        ("PATCH", "/api/v1/namespaces/ml/services/ft-metrics"),
        ("PATCH", "/apis/monitoring.coreos.com/v1/namespaces/ml/servicemonitors/ft-metrics"),
    ]
    [owner] = api.calls[-1][2]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("PyTorchJob", "ft", "uid-3")
