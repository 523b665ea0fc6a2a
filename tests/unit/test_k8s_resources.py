"""The typed descriptors of the resources the Kubernetes backend touches, and the typed reads of
the fields its parts share."""

from __future__ import annotations

import pytest

from jupyter_ktrain.backends.kubernetes.client.fields import (
    conditions,
    container_statuses,
    labels_of,
    name_of,
    pod_phase,
    restarts,
)
from jupyter_ktrain.backends.kubernetes.client.resources import (
    CLUSTER_TRAINING_RUNTIME,
    CONFIG_MAP,
    OWNED,
    SERVICE_MONITOR,
    job_resource,
    resource_of,
)
from jupyter_ktrain.kinds import KIND_TABLE


def test_paths_of_core_group_and_cluster_scoped_resources() -> None:
    assert CONFIG_MAP.path("ml") == "/api/v1/namespaces/ml/configmaps"
    assert CONFIG_MAP.path("ml", "a-code") == "/api/v1/namespaces/ml/configmaps/a-code"
    monitors = SERVICE_MONITOR.path("ml", "x")
    assert monitors == "/apis/monitoring.coreos.com/v1/namespaces/ml/servicemonitors/x"
    runtime = CLUSTER_TRAINING_RUNTIME.path(name="torch-distributed")
    assert (
        runtime == "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed"
    )
    assert CONFIG_MAP.api_version == "v1"
    assert SERVICE_MONITOR.api_version == "monitoring.coreos.com/v1"
    assert CONFIG_MAP.qualified == "configmaps"


@pytest.mark.parametrize("kind", sorted(KIND_TABLE))
def test_each_job_kind_has_its_resource(kind: str) -> None:
    info = KIND_TABLE[kind]
    resource = resource_of(kind)
    assert resource == job_resource(info)
    assert resource.api_version == info.api_version
    assert (
        resource.path("ns", "j")
        == f"/apis/{info.group}/{info.version}/namespaces/ns/{info.plural}/j"
    )
    assert resource.qualified == f"{info.plural}.{info.group}"


def test_owned_kinds_and_unknown_ones() -> None:
    assert set(OWNED) == {
        "ConfigMap",
        "Secret",
        "Pod",
        "Service",
        "ServiceMonitor",
        "TrainingRuntime",
    }
    assert resource_of("Service").plural == "services"
    with pytest.raises(KeyError):
        resource_of("Deployment")


def test_fields_read_what_the_server_sends_and_tolerate_what_it_omits() -> None:
    pod = {
        "metadata": {"name": "j-worker-0", "labels": {"a": "b"}},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}, "junk"],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "restartCount": 2,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                },
                {"name": "sidecar"},
            ],
        },
    }
    assert name_of(pod) == "j-worker-0"
    assert labels_of(pod) == {"a": "b"}
    assert pod_phase(pod) == "Running"
    assert restarts(pod) == 2
    [ready] = conditions(pod)
    assert ready.type == "Ready"
    assert ready.true
    assert ready.reason == ""
    first, second = container_statuses(pod)
    assert first.terminated is not None
    assert first.terminated.exit_code == 137
    assert first.previous == first.terminated
    assert first.terminated.reason == "OOMKilled"
    assert second.restart_count == 0
    assert second.terminated is None
    empty: dict[str, object] = {"metadata": None, "status": None}
    assert name_of(empty) == ""
    assert labels_of(empty) == {}
    assert pod_phase(empty, "Pending") == "Pending"
    assert conditions(empty) == ()
    assert container_statuses(empty) == ()
    assert restarts(empty) == 0
