"""Pure image manifest/config mutation: no network, no files.

``append_layer(image, layer, ...)`` returns a new :class:`Image` whose manifest lists the base
layers plus ``layer`` and whose config gains the layer's diff_id, a history entry, the
environment and working directory. Inputs are never mutated. Media types follow the base:
a Docker v2 schema 2 base gives a Docker image, an OCI base an OCI image.

Serialization is canonical (sorted keys, no spaces) so equal inputs give equal digests: the
pushed manifest digest is a function of (base manifest, base config, layer, env, workdir).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import PackagingError
from ..pod.launch import CODE_DIR, LIB_DIR
from .layer import Layer, sha256_digest

__all__ = [
    "DOCKER_INDEX",
    "DOCKER_MANIFEST",
    "INDEX_TYPES",
    "MANIFEST_ACCEPT",
    "MANIFEST_TYPES",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "Image",
    "append_layer",
    "canonical_json",
    "code_image_env",
    "select_platform",
]

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_INDEX = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

MANIFEST_TYPES = (DOCKER_MANIFEST, OCI_MANIFEST)
INDEX_TYPES = (DOCKER_INDEX, OCI_INDEX)
MANIFEST_ACCEPT = ", ".join(MANIFEST_TYPES + INDEX_TYPES)
_LAYER_TYPE = {DOCKER_MANIFEST: DOCKER_LAYER, OCI_MANIFEST: OCI_LAYER}
_CONFIG_TYPE = {DOCKER_MANIFEST: DOCKER_CONFIG, OCI_MANIFEST: OCI_CONFIG}
HISTORY_CREATED = "1970-01-01T00:00:00Z"


def canonical_json(obj: Any) -> bytes:
    """Stable JSON bytes: sorted keys, compact separators, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class Image:
    """An image manifest plus its config, as parsed JSON and as the exact bytes.

    ``manifest_bytes``/``config_bytes`` are what a registry stores; their digests are
    ``digest``/``config_digest``. Build with :meth:`parse` (from registry bytes).
    """

    manifest: Mapping[str, Any]
    config: Mapping[str, Any]
    media_type: str
    manifest_bytes: bytes
    config_bytes: bytes
    layers_data: Mapping[str, bytes] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return sha256_digest(self.manifest_bytes)

    @property
    def config_digest(self) -> str:
        return sha256_digest(self.config_bytes)

    @property
    def layers(self) -> list[Mapping[str, Any]]:
        return list(self.manifest.get("layers", []))

    @classmethod
    def parse(cls, manifest_bytes: bytes, config_bytes: bytes, media_type: str = "") -> Image:
        """Parse registry bytes; ``media_type`` is the Content-Type when the body lacks one."""
        manifest = _load(manifest_bytes, "manifest")
        config = _load(config_bytes, "config")
        mt = str(manifest.get("mediaType") or media_type or OCI_MANIFEST)
        if mt not in MANIFEST_TYPES:
            raise PackagingError(
                f"The base image's manifest has media type {mt!r}; only Docker v2 schema 2 and "
                "OCI image manifests are supported. Re-push the base with a current tool."
            )
        want = sha256_digest(config_bytes)
        got = manifest.get("config", {}).get("digest")
        if got != want:
            raise PackagingError(f"The base image's config digest is {want}, manifest says {got}.")
        return cls(manifest, config, mt, manifest_bytes, config_bytes)


def _load(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise PackagingError(f"The base image's {what} is not valid JSON: {exc}.") from exc
    if not isinstance(obj, dict):
        raise PackagingError(f"The base image's {what} is not a JSON object.")
    return obj


def select_platform(index: Mapping[str, Any], platform: str = "linux/amd64") -> Mapping[str, Any]:
    """The descriptor in an image index for ``platform`` (``os/arch[/variant]``)."""
    want = platform.split("/")
    if len(want) not in (2, 3):
        raise PackagingError(f"Platform {platform!r} must look like 'linux/amd64'.")
    found = []
    for desc in index.get("manifests", []):
        p = desc.get("platform", {})
        have = [p.get("os", ""), p.get("architecture", "")]
        found.append("/".join(have + ([p["variant"]] if p.get("variant") else [])))
        if have == want[:2] and (len(want) == 2 or p.get("variant") == want[2]):
            return dict(desc)
    raise PackagingError(
        f"The base image has no {platform} variant (it has: {', '.join(found) or 'none'}). "
        "Pick a base built for it or set the platform option."
    )


def _env_list(env: Mapping[str, str], base: list[str]) -> list[str]:
    """Base ``K=V`` list updated with ``env``; PYTHONPATH entries are prepended, not replaced."""
    current = {k: v for k, _, v in (item.partition("=") for item in base)}
    order = [item.split("=", 1)[0] for item in base]
    for key, value in env.items():
        if key == "PYTHONPATH" and current.get(key):
            parts = [p for p in current[key].split(":") if p and p not in value.split(":")]
            value = ":".join([value, *parts])
        if key not in current:
            order.append(key)
        current[key] = value
    return [f"{k}={current[k]}" for k in order]


def code_image_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the code layer needs: ``PYTHONPATH={LIB_DIR}`` plus ``extra``."""
    return {"PYTHONPATH": LIB_DIR, **(extra or {})}


def append_layer(
    image: Image,
    layer: Layer,
    *,
    env: Mapping[str, str] | None = None,
    working_dir: str = CODE_DIR,
    comment: str = "jupyter-ktrain code layer",
    annotations: Mapping[str, str] | None = None,
) -> Image:
    """A new image: ``image`` + ``layer``, env merged (see ``_env_list``), WorkingDir set.

    The history entry uses a fixed timestamp so the result's digest depends on content only.
    """
    mt = image.media_type
    config = copy.deepcopy(dict(image.config))
    cfg = dict(config.get("config") or {})
    cfg["Env"] = _env_list(code_image_env(env), list(cfg.get("Env") or []))
    cfg["WorkingDir"] = working_dir
    config["config"] = cfg
    rootfs = dict(config.get("rootfs") or {"type": "layers"})
    rootfs["diff_ids"] = [*rootfs.get("diff_ids", []), layer.diff_id]
    config["rootfs"] = rootfs
    entry = {"created": HISTORY_CREATED, "created_by": comment, "comment": comment}
    config["history"] = [*config.get("history", []), entry]
    config_bytes = canonical_json(config)

    manifest = copy.deepcopy(dict(image.manifest))
    manifest["config"] = {
        **manifest.get("config", {}),
        "mediaType": manifest.get("config", {}).get("mediaType", _CONFIG_TYPE[mt]),
        "digest": sha256_digest(config_bytes),
        "size": len(config_bytes),
    }
    desc: dict[str, Any] = {"mediaType": _LAYER_TYPE[mt], "digest": layer.digest}
    desc["size"] = layer.size
    if annotations and mt == OCI_MANIFEST:
        desc["annotations"] = dict(annotations)
    manifest["layers"] = [*manifest.get("layers", []), desc]
    if mt == DOCKER_MANIFEST:
        manifest["mediaType"] = mt
    manifest_bytes = canonical_json(manifest)
    data = {**image.layers_data, layer.digest: layer.data}
    return Image(manifest, config, mt, manifest_bytes, config_bytes, data)
