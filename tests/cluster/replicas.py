"""Per-kind rules of the Kubeflow Training Operator (kubeflow.org/v1): defaults, the env each
replica gets (PyTorch: MASTER_*/PET_*; TF: TF_CONFIG; MPI: hostfile), and success rules.

One deviation, stated once: every pod shares 127.0.0.1, so instead of the operator's fixed
ports (PyTorch 23456, TF 2222) each job gets a free port when it is created (the defaulting
webhook's place), and each TF replica uses that port plus its position in the cluster spec.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kind:
    plural: str
    kind: str
    specs_key: str
    container: str
    port_name: str
    controller: str
    master: str  # the replica type whose success is the job's ("" = workers decide)
    default_restart: str


KINDS = {
    "pytorchjobs": Kind(
        "pytorchjobs",
        "PyTorchJob",
        "pytorchReplicaSpecs",
        "pytorch",
        "pytorchjob-port",
        "pytorchjob-controller",
        "Master",
        "OnFailure",
    ),
    "tfjobs": Kind(
        "tfjobs",
        "TFJob",
        "tfReplicaSpecs",
        "tensorflow",
        "tfjob-port",
        "tfjob-controller",
        "Chief",
        "Never",
    ),
    "mpijobs": Kind(
        "mpijobs",
        "MPIJob",
        "mpiReplicaSpecs",
        "mpi",
        "mpijob-port",
        "mpijob-controller",
        "Launcher",
        "Never",
    ),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_container(kind: Kind, template: dict[str, Any]) -> dict[str, Any] | None:
    containers = template.get("spec", {}).get("containers") or []
    named = [c for c in containers if c.get("name") == kind.container]
    return named[0] if named else (containers[0] if containers else None)


def port_of(kind: Kind, spec: dict[str, Any]) -> int | None:
    c = default_container(kind, spec.get("template", {}))
    for p in (c or {}).get("ports") or []:
        if p.get("name") == kind.port_name:
            return int(p["containerPort"])
    return None


def apply_defaults(kind: Kind, job: dict[str, Any]) -> None:
    spec = job.setdefault("spec", {})
    specs = spec.get(kind.specs_key) or {}
    run_policy = spec.setdefault("runPolicy", {})
    run_policy.setdefault("cleanPodPolicy", "None")
    port = free_port()
    for _rt, rspec in specs.items():
        rspec.setdefault("replicas", 1)
        rspec.setdefault("restartPolicy", kind.default_restart)
        if kind.plural == "mpijobs":
            continue
        c = default_container(kind, rspec.setdefault("template", {}))
        if c is not None and not any(p.get("name") == kind.port_name for p in c.get("ports") or []):
            c.setdefault("ports", []).append(
                {"name": kind.port_name, "containerPort": port, "protocol": "TCP"}
            )
    if kind.plural == "pytorchjobs":
        spec.setdefault("nprocPerNode", "auto")
        ep = spec.get("elasticPolicy")
        if ep is not None and "Worker" in specs:
            ep.setdefault("minReplicas", specs["Worker"]["replicas"])
            ep.setdefault("maxReplicas", specs["Worker"]["replicas"])
    if kind.plural == "mpijobs":
        spec.setdefault("slotsPerWorker", 1)


def replica_types(kind: Kind, job: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    specs = job["spec"].get(kind.specs_key) or {}
    order = [kind.master, "Worker", "PS", "Evaluator"]
    return sorted(specs.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9)


def pod_name(job: str, rtype: str, index: int) -> str:
    return f"{job}-{rtype.lower()}-{index}"


def _pytorch_env(job: dict[str, Any], rtype: str, index: int) -> list[dict[str, str]]:
    kind = KINDS["pytorchjobs"]
    spec = job["spec"]
    specs = spec[kind.specs_key]
    name = job["metadata"]["name"]
    total = sum(int(r.get("replicas", 1)) for r in specs.values())
    nproc = str(spec.get("nprocPerNode", "auto"))
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if "Master" in specs:
        port = str(port_of(kind, specs["Master"]))
        addr = pod_name(name, "master", 0)
        rank = index + 1 if rtype == "Worker" else index
        world = total * (int(nproc) if nproc.isdigit() else 1)
        env += [
            {"name": "MASTER_PORT", "value": port},
            {"name": "PET_MASTER_PORT", "value": port},
            {"name": "MASTER_ADDR", "value": addr},
            {"name": "PET_MASTER_ADDR", "value": addr},
            {"name": "WORLD_SIZE", "value": str(world)},
            {"name": "RANK", "value": str(rank)},
            {"name": "PET_NPROC_PER_NODE", "value": nproc},
            {"name": "PET_NODE_RANK", "value": str(rank)},
        ]
    ep = spec.get("elasticPolicy")
    if ep is None:
        env.append({"name": "PET_NNODES", "value": str(total)})
        return env
    host = ep.get("rdzvHost") or pod_name(name, "worker", 0)
    port = ep.get("rdzvPort") or port_of(kind, specs.get("Worker", {}))
    env += [
        {"name": "PET_RDZV_ENDPOINT", "value": f"{host}:{port}"},
        {"name": "PET_RDZV_BACKEND", "value": ep.get("rdzvBackend", "c10d")},
        {"name": "PET_NNODES", "value": f"{ep['minReplicas']}:{ep['maxReplicas']}"},
    ]
    if "maxRestarts" in ep:
        env.append({"name": "PET_MAX_RESTARTS", "value": str(ep["maxRestarts"])})
    if "nProcPerNode" in ep:
        env.append({"name": "PET_NPROC_PER_NODE", "value": str(ep["nProcPerNode"])})
    elif "Master" not in specs:
        env.append({"name": "PET_NPROC_PER_NODE", "value": nproc})
    if "rdzvId" in ep:
        env.append({"name": "PET_RDZV_ID", "value": ep["rdzvId"]})
    if ep.get("rdzvConf"):
        conf = ",".join(f"{c['key']}={c['value']}" for c in ep["rdzvConf"])
        env.append({"name": "PET_RDZV_CONF", "value": conf})
    return env


def _tf_env(job: dict[str, Any], rtype: str, index: int) -> list[dict[str, str]]:
    kind = KINDS["tfjobs"]
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    cluster: dict[str, list[str]] = {}
    offset = 0
    for rt, rspec in replica_types(kind, job):
        base = port_of(kind, rspec) or 2222
        hosts = []
        for i in range(int(rspec.get("replicas", 1))):
            hosts.append(f"{pod_name(name, rt, i)}.{ns}.svc:{base + offset}")
            offset += 1
        if rt != "Evaluator":
            cluster[rt.lower()] = hosts
    config = {
        "cluster": cluster,
        "task": {"type": rtype.lower(), "index": index},
        "environment": "cloud",
    }
    return [{"name": "TF_CONFIG", "value": json.dumps(config)}]


def _mpi_env(job: dict[str, Any], rtype: str, index: int) -> list[dict[str, str]]:
    if rtype != "Launcher":
        return []
    return [
        {"name": "OMPI_MCA_plm_rsh_agent", "value": "/etc/mpi/kubexec.sh"},
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "rsh"},
        {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": "/etc/mpi/kubexec.sh"},
    ]


ENV = {"pytorchjobs": _pytorch_env, "tfjobs": _tf_env, "mpijobs": _mpi_env}


def mpi_config(job: dict[str, Any]) -> dict[str, str]:
    """Data of the ``NAME-config`` ConfigMap the MPIJob launcher mounts at /etc/mpi."""
    name = job["metadata"]["name"]
    slots = int(job["spec"].get("slotsPerWorker", 1))
    workers = int((job["spec"]["mpiReplicaSpecs"].get("Worker") or {}).get("replicas", 0))
    hosts = [pod_name(name, "worker", i) for i in range(workers)]
    return {
        "hostfile": "".join(f"{h} slots={slots}\n" for h in hosts),
        "discover_hosts.sh": "#!/bin/sh\n" + "".join(f"echo {h}:{slots}\n" for h in hosts),
        "kubexec.sh": '#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\nexec sh -c "$*"\n',
    }
