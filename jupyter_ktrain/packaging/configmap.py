"""The ConfigMap route: the job's code travels in a ConfigMap mounted at ``/ktrain``.

Used when no registry is configured. ConfigMap keys must match ``[-._a-zA-Z0-9]+`` and cannot
hold ``/``, so each file gets a flat key and the volume's ``items`` map keys back to nested
paths (``lib/jupyter_ktrain/pod/agent/runner.py``). UTF-8 text goes to ``data``, anything else to
``binaryData`` (base64). The whole object must stay under the API server's 1 MiB limit; past it
a :class:`~jupyter_ktrain.errors.PackagingError` names the registry option.

The Kubernetes backend adds the ownerReference (the job) to ``metadata`` after creating the
job, so the ConfigMap is deleted with it.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ..errors import PackagingError
from ..pod.launch import CODE_DIR, LIB_DIR
from .layer import code_files
from .push_progress import human_bytes

__all__ = [
    "CONFIGMAP_LIMIT",
    "code_volume",
    "configmap_files",
    "configmap_keys",
    "render_code_configmap",
]

CONFIGMAP_LIMIT = 1 << 20
_OVERHEAD = 8 << 10  # metadata, labels, JSON framing, managedFields: keep headroom
_KEY_OK = re.compile(r"^[-._a-zA-Z0-9]+$")
VOLUME_NAME = "ktrain-code"
_PATHS_ANNOTATION = "ktrain.jupyter.org/paths"  # key=path lines: how to rebuild the tree


def configmap_files(files: Mapping[str, bytes], *, include_runner: bool = True) -> dict[str, bytes]:
    """Code-dir-relative paths -> bytes, runner library included (same layout as the layer)."""
    out = {}
    for path, data in code_files(files, include_runner=include_runner).items():
        if not path.startswith(CODE_DIR + "/"):
            raise PackagingError(
                f"{path!r} lies outside {CODE_DIR}; only the code directory can travel in a "
                "ConfigMap. Configure a registry with `%ktrain config registry=...` instead."
            )
        out[path[len(CODE_DIR) + 1 :]] = data
    return out


def _key(path: str) -> str:
    key = re.sub(r"[^-._a-zA-Z0-9]", "_", path.replace("/", "__"))
    return key[-200:].lstrip(".") or "file"


def configmap_keys(paths: list[str]) -> dict[str, str]:
    """Relative path -> a valid, unique ConfigMap key (stable: same paths, same keys)."""
    keys: dict[str, str] = {}
    used: set[str] = set()
    for path in sorted(paths):
        key = _key(path)
        if key in used or not _KEY_OK.match(key):
            key = f"{key[:180]}.{hashlib.sha256(path.encode()).hexdigest()[:12]}"
        used.add(key)
        keys[path] = key
    return keys


def render_code_configmap(
    name: str,
    namespace: str,
    files: Mapping[str, bytes],
    *,
    labels: Mapping[str, str] | None = None,
    include_runner: bool = True,
) -> dict[str, Any]:
    """A v1 ConfigMap holding ``files`` (code-dir-relative paths, runner lib added).

    Raises PackagingError when it would exceed the 1 MiB object limit.
    """
    rel = configmap_files(files, include_runner=include_runner)
    keys = configmap_keys(list(rel))
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for path, content in rel.items():
        try:
            data[keys[path]] = content.decode("utf-8")
        except UnicodeDecodeError:
            binary[keys[path]] = base64.b64encode(content).decode()
    size = sum(len(k) + len(v.encode()) for d in (data, binary) for k, v in d.items())
    size += 2 * sum(len(k) + len(p) for p, k in keys.items())  # the paths annotation
    if size + _OVERHEAD > CONFIGMAP_LIMIT:
        biggest = max(rel, key=lambda p: len(rel[p]))
        raise PackagingError(
            f"The job's code is {human_bytes(size)} (largest file: {biggest}, "
            f"{human_bytes(len(rel[biggest]))}); a ConfigMap holds at most 1 MiB. Configure a "
            "registry to ship it as an image layer: `%ktrain config registry=REGISTRY/REPO`."
        )
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    meta["labels"] = {"app.kubernetes.io/managed-by": "jupyter-ktrain", **(labels or {})}
    table = "\n".join(f"{keys[p]}={p}" for p in sorted(rel))
    meta["annotations"] = {_PATHS_ANNOTATION: table}
    cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data:
        cm["data"] = data
    if binary:
        cm["binaryData"] = binary
    return cm


def code_volume(
    configmap: Mapping[str, Any], *, volume_name: str = VOLUME_NAME
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, str]]]:
    """(volume, volumeMount, env) that place ``configmap``'s files at ``/ktrain``.

    ``items`` restore nested paths from the flat keys. The env sets ``PYTHONPATH`` to the lib
    dir; a container env replaces the image's PYTHONPATH, so the backend should append the
    base image's value if it knows it.
    """
    keys = {**configmap.get("data", {}), **configmap.get("binaryData", {})}
    rel_paths = _paths_from_keys(configmap, list(keys))
    items = [{"key": key, "path": rel_paths[key]} for key in sorted(keys)]
    volume = {
        "name": volume_name,
        "configMap": {"name": configmap["metadata"]["name"], "items": items, "defaultMode": 0o644},
    }
    mount = {"name": volume_name, "mountPath": CODE_DIR, "readOnly": True}
    return volume, mount, [{"name": "PYTHONPATH", "value": LIB_DIR}]


def _paths_from_keys(configmap: Mapping[str, Any], keys: list[str]) -> dict[str, str]:
    paths = configmap.get("metadata", {}).get("annotations", {}).get(_PATHS_ANNOTATION)
    if paths is None:
        raise PackagingError("This ConfigMap was not made by render_code_configmap.")
    table = dict(line.split("=", 1) for line in paths.splitlines() if "=" in line)
    return {k: table[k] for k in keys}
