"""What the real API server adds to built-in objects on create, and its basic validation."""

from __future__ import annotations

import itertools
import re
from typing import Any

from .errors import invalid

_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ips = itertools.count(10)


def validate_name(kind: str, group: str, obj: dict[str, Any]) -> None:
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name and not meta.get("generateName"):
        raise invalid(
            kind,
            group,
            "",
            [
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value: name or generateName is required",
                    "field": "metadata.name",
                }
            ],
        )
    if name and (len(name) > 253 or not _DNS1123.match(name)):
        msg = (
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
        raise invalid(
            kind,
            group,
            name,
            [{"reason": "FieldValueInvalid", "message": msg, "field": "metadata.name"}],
        )


def _pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def _container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _pull_policy(c.get("image", "")))
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")
    for e in c.get("env") or []:
        ref = (e.get("valueFrom") or {}).get("fieldRef")
        if ref:
            ref.setdefault("apiVersion", "v1")
    limits = c["resources"].get("limits") or {}
    requests = (
        c["resources"].setdefault("requests", {}) if limits else c["resources"].get("requests")
    )
    if limits and requests is not None:
        for k, v in limits.items():
            requests.setdefault(k, v)


def pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
    causes = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.containers",
            }
        )
    for i, c in enumerate(containers):
        for f in ("name", "image"):
            if not c.get(f):
                causes.append(
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value",
                        "field": f"spec.containers[{i}].{f}",
                    }
                )
    if causes:
        raise invalid("Pod", "", name, causes)
    for c in containers + (spec.get("initContainers") or []):
        _container(c)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault(
        "tolerations",
        [
            {
                "key": f"node.kubernetes.io/{k}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for k in ("not-ready", "unreachable")
        ],
    )
    for v in spec.get("volumes") or []:
        if "emptyDir" in v and v["emptyDir"] is None:
            v["emptyDir"] = {}
    has_req = any((c.get("resources") or {}).get("requests") for c in containers)
    obj["status"] = {"phase": "Pending", "qosClass": "Burstable" if has_req else "BestEffort"}


def service(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec.get("clusterIP") != "None":
        n = next(_ips)
        spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 1}"
    spec["clusterIPs"] = [spec["clusterIP"]]
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for p in spec.get("ports") or []:
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p.get("port"))
    obj["status"] = {"loadBalancer": {}}


def namespace(obj: dict[str, Any]) -> None:
    name = obj["metadata"].get("name", "")
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    obj["spec"] = {"finalizers": ["kubernetes"]}
    obj["status"] = {"phase": "Active"}


def pvc(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("volumeMode", "Filesystem")
    spec.setdefault("storageClassName", "standard")
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    obj["status"] = {
        "phase": "Bound",
        "accessModes": spec.get("accessModes", ["ReadWriteOnce"]),
        "capacity": {"storage": size},
    }
    spec.setdefault("volumeName", f"pvc-{obj['metadata'].get('name', 'x')}")


def secret(obj: dict[str, Any]) -> None:
    import base64

    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None) or {}
    data = obj.setdefault("data", {})
    for k, v in string_data.items():
        data[k] = base64.b64encode(v.encode()).decode()


BUILTIN_DEFAULTS = {
    "/pods": pod,
    "/services": service,
    "/namespaces": namespace,
    "/persistentvolumeclaims": pvc,
    "/secrets": secret,
}
