"""What the API server serves: built-in resources, CRDs, discovery and OpenAPI documents.

Built-in kinds carry no schema here (the server stores them as sent, with the defaults the
real server adds); custom resources are validated and pruned against the CRD's
``openAPIV3Schema`` (see ``schema.py``). The OpenAPI v3 documents are just enough for
kubectl: each PATCH operation names its GVK and lists the ``fieldValidation`` query parameter,
so kubectl hands validation to this server (``fieldValidation=Strict``) instead of fetching
the protobuf OpenAPI v2 document for client-side validation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CRD_DIR = Path(__file__).resolve().parents[2] / "jupyter_ktrain" / "crds"
RW = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: list[str] = field(default_factory=list)
    verbs: list[str] = field(default_factory=lambda: list(RW))
    subresources: list[str] = field(default_factory=list)
    schema: dict[str, Any] | None = None
    columns: list[dict[str, Any]] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def gv_path(self) -> str:
        return f"apis/{self.group}/{self.version}" if self.group else "api/v1"


def _core(plural: str, kind: str, **kw: Any) -> Resource:
    return Resource("", "v1", plural, kind, **kw)


BUILTINS = [
    _core("namespaces", "Namespace", namespaced=False, short_names=["ns"], subresources=["status"]),
    _core(
        "pods",
        "Pod",
        short_names=["po"],
        subresources=["status", "log"],
        categories=["all"],
    ),
    _core("events", "Event", short_names=["ev"]),
    _core("configmaps", "ConfigMap", short_names=["cm"]),
    _core("secrets", "Secret"),
    _core("services", "Service", short_names=["svc"], subresources=["status"], categories=["all"]),
    _core(
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        short_names=["pvc"],
        subresources=["status"],
    ),
    _core("nodes", "Node", namespaced=False, short_names=["no"], subresources=["status"]),
    _core("serviceaccounts", "ServiceAccount", short_names=["sa"]),
    Resource(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        namespaced=False,
        verbs=["create"],
    ),
]


def load_crds(crd_dir: Path = CRD_DIR) -> list[Resource]:
    """One Resource per served version of each CRD file in ``crd_dir``."""
    out = []
    for path in sorted(crd_dir.glob("*.yaml")):
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        spec = crd["spec"]
        names = spec["names"]
        for ver in spec["versions"]:
            if not ver.get("served", True):
                continue
            subs = ["status"] if "status" in ver.get("subresources", {}) else []
            out.append(
                Resource(
                    spec["group"],
                    ver["name"],
                    names["plural"],
                    names["kind"],
                    namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                    short_names=names.get("shortNames", []),
                    subresources=subs,
                    schema=ver.get("schema", {}).get("openAPIV3Schema"),
                    columns=ver.get("additionalPrinterColumns", []),
                    categories=names.get("categories", []),
                )
            )
    return out


class Registry:
    """Lookup of resources by URL coordinates, plus the discovery documents built from them."""

    def __init__(self, resources: list[Resource]) -> None:
        self.resources = resources
        self._by_path = {(r.group, r.version, r.plural): r for r in resources}
        self._by_kind = {(r.api_version, r.kind): r for r in resources}

    def lookup(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_path.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Resource | None:
        return self._by_kind.get((api_version, kind))

    def by_plural(self, plural: str, group: str = "") -> Resource:
        return next(r for r in self.resources if r.plural == plural and r.group == group)

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in self.resources:
            if r.group and r.version not in out.setdefault(r.group, []):
                out[r.group].append(r.version)
        return out

    def api_versions(self, address: str) -> dict[str, Any]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        }

    def group_list(self) -> dict[str, Any]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [self._group(g, vs) for g, vs in self.groups().items()],
        }

    def group(self, name: str) -> dict[str, Any] | None:
        vs = self.groups().get(name)
        return (
            None
            if vs is None
            else {"kind": "APIGroup", "apiVersion": "v1", **self._group(name, vs)}
        )

    @staticmethod
    def _group(name: str, versions: list[str]) -> dict[str, Any]:
        gvs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
        return {"name": name, "versions": gvs, "preferredVersion": gvs[0]}

    def resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        rs = [r for r in self.resources if r.group == group and r.version == version]
        if not rs:
            return None
        items: list[dict[str, Any]] = []
        for r in rs:
            entry: dict[str, Any] = {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": r.verbs,
            }
            if r.short_names:
                entry["shortNames"] = r.short_names
            if r.categories:
                entry["categories"] = r.categories
            items.append(entry)
            for sub in r.subresources:
                verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
                items.append(
                    {
                        "name": f"{r.plural}/{sub}",
                        "singularName": "",
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": verbs,
                    }
                )
        gv = f"{group}/{version}" if group else version
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": items,
        }

    # -- OpenAPI v3 -------------------------------------------------------------------------

    def openapi_root(self) -> dict[str, Any]:
        paths = {}
        for gv_path in sorted({r.gv_path for r in self.resources}):
            digest = hashlib.sha256(json.dumps(self.openapi_gv(gv_path)).encode()).hexdigest()
            paths[gv_path] = {"serverRelativeURL": f"/openapi/v3/{gv_path}?hash={digest[:32]}"}
        return {"paths": paths}

    def openapi_gv(self, gv_path: str) -> dict[str, Any]:
        rs = [r for r in self.resources if r.gv_path == gv_path]
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {}
        field_validation = {
            "name": "fieldValidation",
            "in": "query",
            "description": "fieldValidation instructs the server on how to handle unknown fields",
            "schema": {"type": "string", "uniqueItems": True},
        }
        for r in rs:
            gvk = {"group": r.group, "version": r.version, "kind": r.kind}
            ns = "/namespaces/{namespace}" if r.namespaced else ""
            url = f"/{gv_path}{ns}/{r.plural}/{{name}}"
            op = {
                "operationId": f"patch{r.kind}",
                "parameters": [field_validation],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }
            paths[url] = {"patch": op}
            schema = dict(
                r.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            )
            schema["x-kubernetes-group-version-kind"] = [gvk]
            name = ".".join(reversed((r.group or "core").split("."))) + f".{r.version}.{r.kind}"
            schemas[name] = schema
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.4"},
            "paths": paths,
            "components": {"schemas": schemas},
        }
