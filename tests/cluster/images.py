"""Image layers from a test registry (distribution API v2), unpacked for the process kubelet.

Base layers, stated once: the local Python environment stands in for an image's base. Layers
larger than ``max_layer_bytes`` (base layers: an OS, Python, torch) are not pulled; the smaller
ones (the job's code layer) are unpacked, and each top-level path they add that the host does
not have (``/ktrain``, ``/workspace``...) is bind-mounted into the pod's mount namespace. The
image config's Env, Entrypoint, Cmd and WorkingDir are honoured. Images whose registry is not
the configured one run on the local environment as they are.
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ACCEPT = ",".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


@dataclass
class Image:
    env: list[str] = field(default_factory=list)
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    workdir: str = ""
    rootfs: Path | None = None
    mounts: list[tuple[Path, str]] = field(default_factory=list)  # (host dir, path in pod)


class Puller:
    def __init__(
        self,
        registry: str | None,
        cache: Path,
        max_layer_bytes: int = 64 << 20,
        shim: Callable[[str], Image | None] | None = None,
    ) -> None:
        self.registry = registry.rstrip("/") if registry else None
        self.shim = shim  # what a known image we cannot pull does (image_shims.py)
        self.host = urlsplit(self.registry).netloc if self.registry else None
        self.cache = cache
        self.max_layer_bytes = max_layer_bytes
        self._lock = threading.Lock()

    def image(self, ref: str) -> Image:
        """The image's config and unpacked small layers; an empty Image when not ours."""
        if not self.host or not ref.startswith(self.host + "/"):
            return (self.shim(ref) if self.shim else None) or Image()
        rest = ref[len(self.host) + 1 :]
        if "@" in rest:
            repo, tag = rest.split("@", 1)
        else:
            repo, _, tag = (
                rest.rpartition(":") if ":" in rest.rsplit("/", 1)[-1] else (rest, "", "latest")
            )
        with self._lock:
            return self._pull(repo, tag)

    def _get(self, path: str, accept: str = "") -> tuple[bytes, str]:
        req = urllib.request.Request(
            f"{self.registry}/v2/{path}", headers={"Accept": accept} if accept else {}
        )
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.read(), resp.headers.get("Content-Type", "")

    def _pull(self, repo: str, tag: str) -> Image:
        raw, _ = self._get(f"{repo}/manifests/{tag}", ACCEPT)
        manifest: dict[str, Any] = json.loads(raw)
        if "manifests" in manifest:
            pick = next(
                (
                    m
                    for m in manifest["manifests"]
                    if m.get("platform", {}).get("architecture") == "amd64"
                ),
                manifest["manifests"][0],
            )
            raw, _ctype = self._get(f"{repo}/manifests/{pick['digest']}", ACCEPT)
            manifest = json.loads(raw)
        config = json.loads(self._get(f"{repo}/blobs/{manifest['config']['digest']}")[0])
        cfg = config.get("config") or {}
        digest = manifest["config"]["digest"].replace(":", "_")
        rootfs = self.cache / digest
        if not rootfs.exists():
            tmp = self.cache / (digest + ".tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            for layer in manifest["layers"]:
                if layer.get("size", 0) > self.max_layer_bytes:
                    continue
                blob = self._get(f"{repo}/blobs/{layer['digest']}")[0]
                with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
                    _apply_layer(tar, tmp)
            tmp.rename(rootfs)
        mounts = [
            (p, "/" + p.name)
            for p in sorted(rootfs.iterdir())
            if p.is_dir() and not Path("/" + p.name).exists()
        ]
        return Image(
            env=cfg.get("Env") or [],
            entrypoint=cfg.get("Entrypoint") or [],
            cmd=cfg.get("Cmd") or [],
            workdir=cfg.get("WorkingDir") or "",
            rootfs=rootfs,
            mounts=mounts,
        )


def _apply_layer(tar: tarfile.TarFile, dest: Path) -> None:
    members = []
    for m in tar.getmembers():
        name = Path(m.name)
        if name.name.startswith(".wh."):
            victim = dest / name.parent / name.name[4:]
            if victim.is_dir():
                import shutil

                shutil.rmtree(victim, ignore_errors=True)
            elif victim.exists():
                victim.unlink()
            continue
        if m.isdev() or m.name.startswith(("/", "..")) or ".." in name.parts:
            continue
        members.append(m)
    tar.extractall(dest, members=members, filter="tar")
