"""Validation before submission: CRD schemas, Kubernetes pod schemas, and semantic checks.

- :func:`validate_objects` checks every rendered object against the ``openAPIV3Schema`` of its
  CRD (``jupyter_ktrain/crds/``) and every pod template against the Kubernetes
  ``PodTemplateSpec`` schema (kubernetes-validate's strict schemas for
  :data:`K8S_SCHEMA_VERSION`), then the rules the operator enforces in its webhook (one
  Master/Chief/Launcher, the container it looks for).
- :func:`check_semantics` checks what no schema can: GPUs per node against the node type the
  user named, ranks per GPU.

Schemas are compiled once per process and cached (:func:`schema_compilations` counts them):
a second job costs no YAML parsing and no schema compilation.

CRD structural-schema keywords are honoured the way the API server does on create:
objects with ``properties`` reject unknown fields (``kubectl``'s default strict field
validation) unless ``x-kubernetes-preserve-unknown-fields``; ``x-kubernetes-int-or-string``
accepts both; ``x-kubernetes-list-type: map|set`` rejects duplicate keys/items; CEL
``x-kubernetes-validations`` of the form ``self in [...]`` are checked and transition rules
(``oldSelf``) skipped, as they only apply to updates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ....errors import SpecError
from ....kinds import DEFAULT_KIND, KIND_TABLE, job_kind
from ....spec.job import JobSpec

__all__ = [
    "K8S_SCHEMA_VERSION",
    "NODE_TYPE_GPUS",
    "check_objects",
    "check_semantics",
    "pod_templates",
    "schema_compilations",
    "validate_objects",
]

K8S_SCHEMA_VERSION = "1.33"
CRD_DIR = Path(__file__).resolve().parents[3] / "crds"
# (apiVersion, kind) -> its CRD in CRD_DIR: every job kind's, and the Trainer runtimes ktrain
# derives a TrainJob's own from
CRD_FILES = {
    **{(k.api_version, k.name): k.crd_file for k in KIND_TABLE.values()},
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): (
        "trainer.kubeflow.org_clustertrainingruntimes.yaml"
    ),
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): (
        "trainer.kubeflow.org_trainingruntimes.yaml"
    ),
}

# GPUs per node of well-known node types, by the label that names them. Data, not logic: a
# platform team's node types are checked by the cluster preflight against real nodes.
NODE_TYPE_GPUS: dict[str, dict[str, int]] = {
    "node.kubernetes.io/instance-type": {
        "p3.2xlarge": 1,
        "p3.8xlarge": 4,
        "p3.16xlarge": 8,
        "p3dn.24xlarge": 8,
        "p4d.24xlarge": 8,
        "p4de.24xlarge": 8,
        "p5.48xlarge": 8,
        "p5e.48xlarge": 8,
        "p5en.48xlarge": 8,
        "g4dn.xlarge": 1,
        "g4dn.12xlarge": 4,
        "g4dn.metal": 8,
        "g5.xlarge": 1,
        "g5.12xlarge": 4,
        "g5.48xlarge": 8,
        "g6.xlarge": 1,
        "g6.48xlarge": 8,
        "a2-highgpu-1g": 1,
        "a2-highgpu-2g": 2,
        "a2-highgpu-4g": 4,
        "a2-highgpu-8g": 8,
        "a2-megagpu-16g": 16,
        "a2-ultragpu-8g": 8,
        "a3-highgpu-8g": 8,
        "a3-megagpu-8g": 8,
        "g2-standard-4": 1,
        "Standard_NC24ads_A100_v4": 1,
        "Standard_NC96ads_A100_v4": 4,
        "Standard_ND96asr_v4": 8,
        "Standard_ND96amsr_A100_v4": 8,
        "Standard_ND96isr_H100_v5": 8,
        "BM.GPU4.8": 8,
        "BM.GPU.A100-v2.8": 8,
        "BM.GPU.H100.8": 8,
    },
    "nvidia.com/gpu.product": {
        "NVIDIA-A100-SXM4-40GB": 8,
        "NVIDIA-A100-SXM4-80GB": 8,
        "NVIDIA-H100-80GB-HBM3": 8,
        "NVIDIA-H200": 8,
        "NVIDIA-GH200-480GB": 1,
        "NVIDIA-GB200": 4,
        "Tesla-V100-SXM2-16GB": 8,
        "Tesla-V100-SXM2-32GB": 8,
        "NVIDIA-L4": 8,
        "Tesla-T4": 8,
        "NVIDIA-A10G": 8,
    },
}
NODE_TYPE_GPUS["beta.kubernetes.io/instance-type"] = NODE_TYPE_GPUS[
    "node.kubernetes.io/instance-type"
]

_compilations = 0


def schema_compilations() -> int:
    """How many schemas this process has loaded and compiled (for tests and the benchmark)."""
    return _compilations


# --------------------------------------------------------------------------- CRD schemas


def _structural(node: Any) -> Any:
    """Rewrite a CRD schema's Kubernetes keywords into plain JSON Schema (see module doc)."""
    if isinstance(node, list):
        return [_structural(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural(v) for k, v in node.items() if k != "description"}
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        for key in ("apiVersion", "kind"):
            props.setdefault(key, {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    return out


def _list_map(validator: Any, keys: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(instance, list):
        return
    seen: dict[tuple[Any, ...], int] = {}
    for i, item in enumerate(instance):
        if not isinstance(item, dict):
            continue
        key = tuple(item.get(k) for k in keys)
        if key in seen:
            shown = ", ".join(f"{k}={v!r}" for k, v in zip(keys, key, strict=True))
            yield ValidationError(f"duplicate entry {shown} (items {seen[key]} and {i})")
        seen[key] = i


_IN_LIST = re.compile(r"^self in \[(.*)\]$")


def _cel(validator: Any, rules: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    for rule in rules:
        match = _IN_LIST.match(str(rule.get("rule", "")).strip())
        if match:
            allowed = [v.strip().strip("'\"") for v in match.group(1).split(",")]
            if instance not in allowed:
                yield ValidationError(rule.get("message") or f"must be one of {allowed}")


@lru_cache(maxsize=1)
def _crd_validator_class() -> Any:
    from jsonschema import Draft7Validator, validators

    return validators.extend(
        Draft7Validator,
        {"x-kubernetes-list-map-keys": _list_map, "x-kubernetes-validations": _cel},
    )


def _load_yaml(path: Path) -> Any:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)


@cache
def crd_validator(api_version: str, kind: str) -> Any:
    """The compiled validator of ``kind`` at ``api_version`` (cached per process)."""
    global _compilations
    name = CRD_FILES.get((api_version, kind))
    if name is None:
        known = ", ".join(f"{k} {a}" for a, k in CRD_FILES)
        raise SpecError(f"No CRD schema for {kind} {api_version}; known: {known}.")
    crd = _load_yaml(CRD_DIR / name)
    version = api_version.split("/")[-1]
    (entry,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _structural(entry["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    cls = _crd_validator_class()
    _compilations += 1
    return cls(schema)


# --------------------------------------------------------------------------- pod schemas


def pod_template_validator(version: str = K8S_SCHEMA_VERSION) -> Any:
    """kubernetes-validate's strict ``PodTemplateSpec`` schema for ``version`` (cached)."""
    return core_validator("podtemplatespec-v1.json", version)


@cache
def core_validator(schema_file: str, version: str = K8S_SCHEMA_VERSION) -> Any:
    """kubernetes-validate's strict schema of a core type (``service-v1.json``...), cached."""
    global _compilations
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    folder = root / f"v{version}.0-local-strict"
    if not folder.is_dir():
        raise SpecError(f"kubernetes-validate has no schemas for Kubernetes {version}.")
    schema = json.loads((folder / schema_file).read_text())
    definitions = json.loads((folder / "_definitions.json").read_text())
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    _compilations += 1
    return Draft202012Validator(schema, registry=registry)


def pod_templates(obj: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, PodTemplateSpec) of every pod an object will create.

    A TrainJob has no full pod template; its trainer container and the pod spec of its
    runtime patches are assembled into one so the same Kubernetes schema checks them.
    """
    kind, spec = job_kind(obj.get("kind", "")), obj.get("spec") or {}
    if kind is not None and kind.replica_key:
        key = kind.replica_key
        for rtype, replica in (spec.get(key) or {}).items():
            yield f"spec.{key}.{rtype}.template", (replica or {}).get("template") or {}
    elif kind is not None and kind.trainer_runtime:
        yield "spec.trainer+runtimePatches", _trainjob_pod(spec, kind.container)


def _trainjob_pod(spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    trainer = spec.get("trainer") or {}
    container: dict[str, Any] = {"name": name}
    for src, dst in (
        ("image", "image"),
        ("command", "command"),
        ("args", "args"),
        ("env", "env"),
        ("resourcesPerNode", "resources"),
    ):
        if src in trainer:
            container[dst] = trainer[src]
    pod: dict[str, Any] = {"containers": [container]}
    for patch in spec.get("runtimePatches") or []:
        template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        for job in (template or {}).get("replicatedJobs") or []:
            pod_spec = ((job.get("template") or {}).get("spec") or {}).get("template") or {}
            for k, v in (pod_spec.get("spec") or {}).items():
                if k != "containers":
                    pod[k] = v
            for c in (pod_spec.get("spec") or {}).get("containers") or []:
                if c.get("name") == name:
                    container.update({k: v for k, v in c.items() if k != "name"})
    return {"spec": pod}


# --------------------------------------------------------------------------- entry points


def _path(error: Any) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) or "(top)"


def _errors(validator: Any, instance: Any, prefix: str) -> list[str]:
    errs = sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{prefix}{'.' if prefix else ''}{_path(e)}: {e.message}" for e in errs]


def validate_objects(
    objects: Sequence[Mapping[str, Any]], *, k8s_version: str = K8S_SCHEMA_VERSION
) -> None:
    """Raise one :class:`SpecError` listing every schema and operator-rule violation."""
    problems: list[str] = []
    for obj in objects:
        api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        name = (obj.get("metadata") or {}).get("name", "?")
        if (api, kind) == ("v1", "Service"):
            found = _errors(core_validator("service-v1.json", k8s_version), obj, "")
            problems += [f"{kind} {name}: {p}" for p in found]
            continue
        if (api, kind) == ("monitoring.coreos.com/v1", "ServiceMonitor"):
            problems += [f"{kind} {name}: {p}" for p in check_service_monitor(obj, objects)]
            continue
        if (api, kind) not in CRD_FILES:
            problems.append(f"{kind} {name}: no schema for {api} {kind}")
            continue
        found = _errors(crd_validator(api, kind), obj, "")
        pod_validator = pod_template_validator(k8s_version)
        for path, template in pod_templates(obj):
            found += _errors(pod_validator, template, path)
        found += check_objects([obj])
        problems += [f"{kind} {name}: {p}" for p in found]
    if problems:
        shown = "\n".join(f"  - {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise SpecError(
            f"The rendered objects would be rejected by the cluster:\n{shown}{more}\n"
            "Fix the flags or YAML that produce these fields (or report a bug if ktrain "
            "rendered them from valid flags)."
        )


def check_service_monitor(
    monitor: Mapping[str, Any], objects: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What the Prometheus operator needs of our ServiceMonitor (we ship no schema for its
    CRD): it selects one of the Services rendered with it, by a port name that Service has,
    with a duration Prometheus parses."""
    spec = monitor.get("spec") or {}
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    services = [
        o
        for o in objects
        if o.get("kind") == "Service"
        and wanted
        and all(
            ((o.get("metadata") or {}).get("labels") or {}).get(k) == v for k, v in wanted.items()
        )
    ]
    if not services:
        return [f"spec.selector.matchLabels {wanted} selects none of the Services rendered"]
    ports = {p.get("name") for s in services for p in (s.get("spec") or {}).get("ports") or []}
    problems = []
    for i, ep in enumerate(spec.get("endpoints") or []):
        if ep.get("port") not in ports:
            problems.append(f"spec.endpoints[{i}].port {ep.get('port')!r} is not a Service port")
        if not re.fullmatch(r"(\d+(ms|s|m|h))+", str(ep.get("interval", "30s"))):
            problems.append(f"spec.endpoints[{i}].interval {ep.get('interval')!r} is no duration")
    return problems if spec.get("endpoints") else ["spec.endpoints is empty"]


def check_objects(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The operator's own webhook rules (:mod:`jupyter_ktrain.kinds`): one Master/Chief/
    Launcher, the replica types it requires, its container name, elastic bounds. Returns
    problems (empty when fine)."""
    problems: list[str] = []
    for obj in objects:
        kind, spec = job_kind(obj.get("kind", "")), obj.get("spec") or {}
        if kind is None:
            continue
        replicas = spec.get(kind.replica_key or "", {}) or {}
        for rtype in kind.replicas if kind.replica_key else ():
            count = (replicas.get(rtype.name) or {}).get("replicas", 1)
            if rtype.singleton and rtype.name in replicas and count != 1:
                problems.append(
                    f"{rtype.name} replicas must be 1 (got {count}); add Workers instead"
                )
            if rtype.required and rtype.name not in replicas:
                problems.append(f"{rtype.name} is missing (the operator requires one)")
        want = kind.container if kind.container_required else None
        for rtype_name, replica in replicas.items():
            names = [
                c.get("name")
                for c in ((replica or {}).get("template") or {})
                .get("spec", {})
                .get("containers", [])
            ]
            if want and want not in names:
                problems.append(
                    f"{rtype_name} has no container named {want!r} (the operator needs one)"
                )
        elastic = spec.get("elasticPolicy") or {}
        lo, hi = elastic.get("minReplicas"), elastic.get("maxReplicas")
        if lo is not None and hi is not None and lo > hi:
            problems.append(f"elasticPolicy minReplicas {lo} > maxReplicas {hi}")
    return problems


def check_semantics(spec: JobSpec) -> None:
    """What the schema cannot express; raises one :class:`SpecError` naming the flag."""
    gpus = spec.resources.gpus
    for key, value in spec.scheduling.node_selector:
        offered: int | None = None
        if key == "nvidia.com/gpu.count" and value.isdigit():
            offered = int(value)
        else:
            offered = NODE_TYPE_GPUS.get(key, {}).get(value)
        if offered is not None and gpus > offered:
            raise SpecError(
                f"--gpus-per-node {gpus} but --node-selector {key}={value} names a node type "
                f"with {offered} GPU(s) per node, so no node could ever run a pod: use "
                f"--gpus-per-node {offered} or fewer (and more --nodes), or another node type."
            )
    if gpus and spec.procs_per_node is not None and spec.procs_per_node > gpus:
        raise SpecError(
            f"--procs-per-node {spec.procs_per_node} is more than --gpus-per-node {gpus}: NCCL "
            f"needs one GPU per rank. Use --procs-per-node {gpus} (or leave it out)."
        )


def warm_up(
    kinds: Sequence[tuple[str, str]] = ((KIND_TABLE[DEFAULT_KIND].api_version, DEFAULT_KIND),),
) -> None:
    """Import the schema libraries and compile the validators a first job will need.

    Importing ``jsonschema`` (with the optional format checkers a Jupyter install brings) and
    compiling the CRD schemas takes about a second; done in a background thread when the
    extension loads, the user's first ``%%ktrain`` does not pay it.
    """
    for api_version, kind in kinds:
        crd_validator(api_version, kind)
    pod_template_validator()
