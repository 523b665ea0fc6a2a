"""Ship a job's code: a deterministic layer appended to a base image through the registry API
(:func:`push_code_image`), or a ConfigMap (:func:`render_code_configmap` + :func:`code_volume`).

Submodules import lazily.

    layer.py         deterministic tar.gz layer, runner files, blob cache
    image.py         pure manifest/config mutation (append_layer)
    reference.py     image reference parsing
    auth.py          credentials (docker config.json, helpers) and challenges
    oci_client.py    OCI distribution client (manifests, blobs, uploads)
    registry_session.py  its HTTP session over httpx: auth, retries, errors
    push.py          push_code_image: the whole append-and-push
    requirements.py  which route the pinned requirements take (pod start or shipped wheels)
    configmap.py     the ConfigMap route
    push_progress.py text and ipywidgets progress bars
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PushResult",
    "auto_progress",
    "build_layer",
    "code_volume",
    "push_code_image",
    "render_code_configmap",
    "runner_files",
]

_WHERE = {
    "PushResult": "push",
    "push_code_image": "push",
    "auto_progress": "progress",
    "build_layer": "layer",
    "runner_files": "layer",
    "code_volume": "configmap",
    "render_code_configmap": "configmap",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(name)
