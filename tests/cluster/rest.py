"""A small JSON client for the Kubernetes API, used by the test cluster's own parts (the
kubelet, set-up, faults): token over TLS, errors keep the server's Status message."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class ApiError(Exception):
    def __init__(self, code: int, status: dict[str, Any]) -> None:
        super().__init__(f"{code}: {status.get('message', status)}")
        self.code = code
        self.status = status


class Rest:
    def __init__(self, server: str, token: str, ca: Path) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.ctx = ssl.create_default_context(cafile=str(ca))

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Any:
        url = self.server + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                status = json.loads(raw)
            except ValueError:
                status = {"message": raw.decode(errors="replace")}
            raise ApiError(exc.code, status) from None
        return json.loads(raw) if raw else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def try_get(self, path: str) -> Any:
        try:
            return self.get(path)
        except ApiError as exc:
            if exc.code == 404:
                return None
            raise

    def create(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any, kind: str = "merge") -> Any:
        ctype = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        return self.request("PATCH", path, body, content_type=ctype)

    def delete(self, path: str, body: Any = None) -> Any:
        try:
            return self.request("DELETE", path, body)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return None

    def watch(
        self, path: str, resource_version: str = "", timeout: int = 300, **params: Any
    ) -> Iterator[dict[str, Any]]:
        """Watch events (dicts with type/object) until the server ends the stream."""
        q = {"watch": "1", "timeoutSeconds": str(timeout), "allowWatchBookmarks": "true", **params}
        if resource_version:
            q["resourceVersion"] = resource_version
        url = f"{self.server}{path}?{urllib.parse.urlencode(q)}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            resp = urllib.request.urlopen(req, context=self.ctx, timeout=timeout + 30)
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, {"message": exc.read().decode(errors="replace")}) from None
        with resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)
