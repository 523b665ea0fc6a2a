"""Request semantics of the API server, independent of HTTP: (method, path, query, headers,
body) -> Response. ``server.py`` is the thin HTTP edge around it."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from . import errors, patch, proto, tables
from .defaults import BUILTIN_DEFAULTS, validate_name
from .errors import ApiError
from .resources import Registry, Resource
from .schema import validate
from .selectors import field_selector, label_selector
from .store import Store

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4",
    "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T16:02:27Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}

Mutator = Callable[[dict[str, Any]], None]
LogSource = Callable[[str, str, dict[str, str]], Iterator[bytes]]


@dataclass
class Response:
    code: int = 200
    body: Any = None
    stream: Iterator[bytes] | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Rule:
    """One RBAC table row; ``"*"`` matches anything."""

    verbs: tuple[str, ...] = ("*",)
    groups: tuple[str, ...] = ("*",)
    resources: tuple[str, ...] = ("*",)
    namespaces: tuple[str, ...] = ("*",)

    def allows(self, attrs: dict[str, Any]) -> bool:
        res = attrs.get("resource", "")
        if attrs.get("subresource"):
            res = f"{res}/{attrs['subresource']}"
        checks = [
            (self.verbs, attrs.get("verb", "")),
            (self.groups, attrs.get("group", "")),
            (self.resources, res),
            (self.namespaces, attrs.get("namespace", "")),
        ]
        return all("*" in allowed or value in allowed for allowed, value in checks)


class Api:
    def __init__(self, registry: Registry, store: Store, address: str) -> None:
        self.registry = registry
        self.store = store
        self.address = address
        self.mutators: dict[str, list[Mutator]] = {}
        self.rbac: list[Rule] = [Rule()]
        self.log_source: LogSource | None = None
        self.bookmark_interval = 1.0

    # -- routing ----------------------------------------------------------------------------

    def handle(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> Response:
        path = path.rstrip("/") or "/"
        if path == "/version":
            return Response(body=VERSION)
        if path in ("/healthz", "/readyz", "/livez"):
            return Response(body="ok", content_type="text/plain")
        if path == "/api":
            return Response(body=self.registry.api_versions(self.address))
        if path == "/apis":
            return Response(body=self.registry.group_list())
        if path == "/openapi/v3":
            return Response(body=self.registry.openapi_root())
        if path.startswith("/openapi/v3/"):
            return Response(body=self.registry.openapi_gv(path[len("/openapi/v3/") :]))
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 2:
            if len(parts) == 2:
                doc = self.registry.group(parts[1])
                if doc is None:
                    raise errors.path_not_found()
                return Response(body=doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise errors.path_not_found()
        if not rest:
            doc = self.registry.resource_list(group, version)
            if doc is None:
                raise errors.path_not_found()
            return Response(body=doc)
        return self._resource(method, group, version, rest, query, headers, body)

    def _resource(
        self,
        method: str,
        group: str,
        version: str,
        rest: list[str],
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
    ) -> Response:
        ns: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        res = self.registry.lookup(group, version, plural)
        if res is None or len(rest) > 3 or (sub and sub not in res.subresources):
            raise errors.path_not_found()
        if not res.namespaced:
            ns = ""
        accept = headers.get("accept", "")
        if "protobuf" in headers.get("content-type", "") and body:
            body = json.dumps(proto.decode(body)).encode()
        if method == "GET":
            if sub == "log":
                return self._logs(ns or "", name, query)
            if name:
                obj = self.store.get(res, ns or "", name)
                if "as=Table" in accept:
                    rv = obj["metadata"]["resourceVersion"]
                    return Response(
                        body=tables.table(res, [obj], rv, query.get("includeObject", ""))
                    )
                return Response(body=obj)
            if query.get("watch") in ("true", "1"):
                return self._watch(res, ns, query, accept)
            return self._list(res, ns, query, accept)
        if method == "POST" and not name:
            return self._create(res, ns or "default", query, self._decode(body))
        if method == "PUT" and name:
            return self._replace(res, ns or "", name, sub, query, self._decode(body))
        if method == "PATCH" and name:
            return self._patch(res, ns or "", name, sub, query, headers, body)
        if method == "DELETE":
            return self._delete(res, ns, name, query, body)
        raise errors.method_not_allowed(method, res.plural, res.group)

    @staticmethod
    def _decode(body: bytes) -> Any:
        try:
            text = body.decode()
            return (
                json.loads(text) if text.lstrip().startswith(("{", "[")) else yaml.safe_load(text)
            )
        except (ValueError, yaml.YAMLError) as exc:
            raise errors.bad_request(
                f"the body of the request was in an unknown format: {exc}"
            ) from exc

    # -- reads ------------------------------------------------------------------------------

    def _list(self, res: Resource, ns: str | None, query: dict[str, str], accept: str) -> Response:
        pred_l = label_selector(query.get("labelSelector"))
        pred_f = field_selector(query.get("fieldSelector"))
        items, rv = self.store.list(res, ns, lambda o: pred_l(o) and pred_f(o))
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        start = 0
        if query.get("continue"):
            token = json.loads(base64.b64decode(query["continue"]))
            start, meta["resourceVersion"] = token["start"], token["rv"]
        limit = int(query.get("limit") or 0)
        if limit and start + limit < len(items):
            nxt = {"start": start + limit, "rv": meta["resourceVersion"]}
            meta["continue"] = base64.b64encode(json.dumps(nxt).encode()).decode()
            meta["remainingItemCount"] = len(items) - start - limit
            items = items[start : start + limit]
        else:
            items = items[start:]
        if "as=Table" in accept:
            return Response(
                body=tables.table(
                    res, items, meta["resourceVersion"], query.get("includeObject", "")
                )
            )
        return Response(
            body={
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": meta,
                "items": items,
            }
        )

    def _watch(self, res: Resource, ns: str | None, query: dict[str, str], accept: str) -> Response:
        pred_l = label_selector(query.get("labelSelector"))
        pred_f = field_selector(query.get("fieldSelector"))
        rv = query.get("resourceVersion")
        since = int(rv) if rv and rv != "0" else None
        timeout = float(query.get("timeoutSeconds") or 1800)
        bookmarks = self.bookmark_interval if query.get("allowWatchBookmarks") == "true" else None
        as_table = "as=Table" in accept
        include = query.get("includeObject", "")
        events = self.store.watch(
            res, ns, since, lambda o: pred_l(o) and pred_f(o), time.monotonic() + timeout, bookmarks
        )

        def stream() -> Iterator[bytes]:
            first = True
            try:
                for typ, obj in events:
                    if typ == "BOOKMARK":
                        obj = {"kind": res.kind, "apiVersion": res.api_version, **obj}
                    elif as_table:
                        rv_ = obj["metadata"].get("resourceVersion", "")
                        obj = tables.table(res, [obj], rv_, include, with_columns=first)
                        first = False
                    yield json.dumps({"type": typ, "object": obj}).encode() + b"\n"
            except ApiError as exc:
                yield json.dumps({"type": "ERROR", "object": exc.status()}).encode() + b"\n"

        return Response(stream=stream())

    def _logs(self, ns: str, name: str, query: dict[str, str]) -> Response:
        if self.log_source is None:
            raise errors.path_not_found()
        return Response(stream=self.log_source(ns, name, query), content_type="text/plain")

    # -- writes -----------------------------------------------------------------------------

    def _admit(
        self, res: Resource, obj: dict[str, Any], query: dict[str, str]
    ) -> tuple[dict[str, Any], list[str]]:
        """Validation + pruning (CRDs), defaulting (built-ins) and mutating hooks."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be an object")
        name = (obj.get("metadata") or {}).get("name", "")
        warnings: list[str] = []
        if obj.get("kind") and obj.get("kind") != res.kind:
            raise errors.bad_request(
                f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                f"expected API version ({res.api_version})"
                if obj.get("apiVersion") != res.api_version
                else f'{obj.get("kind")} in version "{res.version}" cannot be handled as a '
                f"{res.kind}"
            )
        if res.schema is not None:
            obj, causes, unknown = validate(res.schema, obj)
            mode = query.get("fieldValidation", "Warn")
            if unknown and mode == "Strict":
                fields = ", ".join(f'unknown field "{u}"' for u in unknown)
                raise errors.bad_request(
                    f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                    f"strict decoding error: {fields}"
                )
            if unknown and mode == "Warn":
                warnings = [f'unknown field "{u}"' for u in unknown]
            if causes:
                raise errors.invalid(res.kind, res.group, name, causes)
        return obj, warnings

    @staticmethod
    def _warn_headers(warnings: list[str]) -> dict[str, str]:
        return {"Warning": ", ".join(f'299 - "{w}"' for w in warnings)} if warnings else {}

    def _create(self, res: Resource, ns: str, query: dict[str, str], obj: Any) -> Response:
        if res.plural == "selfsubjectaccessreviews":
            return self._access_review(obj)
        obj, warnings = self._admit(res, obj, query)
        meta = obj.setdefault("metadata", {})
        if res.namespaced and meta.get("namespace") and meta["namespace"] != ns:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        validate_name(res.kind, res.group, obj)
        if res.key in BUILTIN_DEFAULTS:
            BUILTIN_DEFAULTS[res.key](obj)
        for hook in self.mutators.get(res.key, []):
            hook(obj)
        if query.get("dryRun") == "All":
            return Response(201, obj)
        created = self.store.create(res, ns, obj)
        return Response(201, created, headers=self._warn_headers(warnings))

    def _replace(
        self, res: Resource, ns: str, name: str, sub: str, query: dict[str, str], obj: Any
    ) -> Response:
        obj, warnings = self._admit(res, obj, query)
        if (obj.get("metadata") or {}).get("name", name) != name:
            raise errors.bad_request("the name of the object does not match the name on the URL")
        new = self.store.replace(res, ns, name, obj, sub)
        return Response(200, new, headers=self._warn_headers(warnings))

    def _patch(
        self,
        res: Resource,
        ns: str,
        name: str,
        sub: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
    ) -> Response:
        ctype = headers.get("content-type", "").split(";")[0]
        doc = self._decode(body)
        if ctype == "application/apply-patch+yaml" and self.store.try_get(res, ns, name) is None:
            doc.setdefault("metadata", {})["name"] = name
            return self._create(res, ns, query, doc)
        for _ in range(5):
            current = self.store.get(res, ns, name)
            if ctype == "application/json-patch+json":
                new = patch.json_patch(current, doc)
            else:
                new = patch.merge(current, doc, strategic=ctype.startswith("application/strategic"))
            new.setdefault("metadata", {})["resourceVersion"] = current["metadata"][
                "resourceVersion"
            ]
            try:
                return self._replace(res, ns, name, sub, query, new)
            except ApiError as exc:
                if exc.reason != "Conflict" or "resourceVersion" in (doc.get("metadata") or {}):
                    raise
        raise errors.conflict(res.plural, res.group, name)

    def _delete(
        self, res: Resource, ns: str | None, name: str, query: dict[str, str], body: bytes
    ) -> Response:
        opts = self._decode(body) if body.strip() else {}
        policy = (
            (opts or {}).get("propagationPolicy") or query.get("propagationPolicy") or "Background"
        )
        if (opts or {}).get("orphanDependents") is True:
            policy = "Orphan"
        if not name:
            pred = label_selector(query.get("labelSelector"))
            items, rv = self.store.list(res, ns, pred)
            for o in items:
                self.store.delete(
                    res, o["metadata"].get("namespace", ""), o["metadata"]["name"], policy
                )
            return Response(
                body={
                    "kind": f"{res.kind}List",
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(rv)},
                    "items": items,
                }
            )
        obj = self.store.delete(res, ns or "", name, policy)
        if res.plural in ("pods", "namespaces") or res.group:
            return Response(body=obj)
        details: dict[str, Any] = {"name": name, "kind": res.plural, "uid": obj["metadata"]["uid"]}
        if res.group:
            details["group"] = res.group
        return Response(
            body={
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            }
        )

    def _access_review(self, obj: dict[str, Any]) -> Response:
        attrs = (obj.get("spec") or {}).get("resourceAttributes") or {}
        allowed = any(rule.allows(attrs) for rule in self.rbac)
        out = dict(obj)
        out.setdefault("metadata", {})["creationTimestamp"] = None
        out["apiVersion"], out["kind"] = "authorization.k8s.io/v1", "SelfSubjectAccessReview"
        out["status"] = {"allowed": allowed}
        if allowed:
            out["status"]["reason"] = "allowed by the test cluster's RBAC table"
        return Response(201, out)
