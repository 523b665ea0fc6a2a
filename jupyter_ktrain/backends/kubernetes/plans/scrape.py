"""The objects that let Prometheus scrape a job's agents (``--metrics-port``). Pure.

Every replica that runs the agent serves ``/metrics`` on the port (:mod:`jupyter_ktrain.pod.agent
.metrics`). The job gets a headless Service ``{job}-metrics`` over those pods and, where the
Prometheus operator is installed (its ``monitoring.coreos.com`` API is served, found by
discovery), a ServiceMonitor that scrapes each of the Service's endpoints. Both are created
before the job and owned by it, so they go when it goes.

The Service selects pods by the labels their controller puts on them (the Training
Operator's job-name label; JobSet's for a TrainJob, whose pods get no labels of ours). The
MPIJob's workers run sshd, not the agent: only its launcher is selected. The ServiceMonitor
keeps the samples' own ``job`` label (``honorLabels``), which Prometheus would otherwise
rename ``exported_job`` in favour of its scrape job's name.
"""

from __future__ import annotations

from typing import Any

from ....kinds import KIND_TABLE
from ....spec.job import JobSpec
from ..client.resources import SERVICE_MONITOR
from ..labels import JOB_LABEL

__all__ = [
    "COMPONENT",
    "METRICS_PORT_NAME",
    "metrics_env",
    "metrics_objects",
    "metrics_service_name",
]

METRICS_PORT_NAME = "metrics"
COMPONENT = ("app.kubernetes.io/component", "metrics")
SCRAPE_INTERVAL = "15s"
_OPERATOR_JOB = "training.kubeflow.org/job-name"
_JOBSET = "jobset.sigs.k8s.io/jobset-name"


def metrics_service_name(job: str) -> str:
    return f"{job}-metrics"


def metrics_env(spec: JobSpec) -> tuple[tuple[str, str], ...]:
    """What the agent in each pod needs: the port and the job name (replica = pod name)."""
    if spec.metrics_port is None:
        return ()
    return (("KTRAIN_METRICS_PORT", str(spec.metrics_port)), ("KTRAIN_JOB_NAME", spec.name))


def _selector(spec: JobSpec) -> dict[str, str]:
    """The pods that serve metrics: the JobSet's (a Trainer job), else the operator's job's,
    of the one replica type whose pods run the agent where the others do not (MPIJob)."""
    kind = KIND_TABLE[spec.kind]
    if kind.trainer_runtime:
        return {_JOBSET: spec.name}
    selector = {_OPERATOR_JOB: spec.name}
    serving = [r for r in kind.replicas if r.metrics]
    if len(serving) < len(kind.replicas):
        (only,) = serving
        selector["training.kubeflow.org/replica-type"] = only.name.lower()
    return selector


def metrics_objects(
    spec: JobSpec, labels: dict[str, str], *, service_monitor: bool
) -> list[dict[str, Any]]:
    """``[Service, ServiceMonitor]`` (the monitor only with ``service_monitor``); empty when
    the spec asks for no metrics port."""
    if spec.metrics_port is None:
        return []
    name = metrics_service_name(spec.name)
    meta: dict[str, Any] = {"name": name}
    if spec.namespace:
        meta["namespace"] = spec.namespace
    meta["labels"] = {**labels, COMPONENT[0]: COMPONENT[1]}
    port = spec.metrics_port
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "clusterIP": "None",
            "selector": _selector(spec),
            "ports": [
                {"name": METRICS_PORT_NAME, "port": port, "targetPort": port, "protocol": "TCP"}
            ],
        },
    }
    if not service_monitor:
        return [service]
    monitor = {
        "apiVersion": SERVICE_MONITOR.api_version,
        "kind": "ServiceMonitor",
        "metadata": {**meta, "labels": dict(meta["labels"])},
        "spec": {
            "selector": {"matchLabels": {JOB_LABEL: spec.name, COMPONENT[0]: COMPONENT[1]}},
            "endpoints": [
                {
                    "port": METRICS_PORT_NAME,
                    "path": "/metrics",
                    "interval": SCRAPE_INTERVAL,
                    "honorLabels": True,
                }
            ],
        },
    }
    return [service, monitor]
