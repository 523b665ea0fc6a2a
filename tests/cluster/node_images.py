"""The real node's base images: made once per machine by ``build/images.sh`` (debootstrap, no
Docker) as OCI image layouts, pushed here into a test registry through the project's own
registry client, as a platform team pushes its base images.

    folder = base_images()                                  # builds on first use (progress: stderr)
    ref = push_layout(folder / "debian-python", "127.0.0.1:5000", "base/debian-python", "1")
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from jupyter_ktrain.packaging.oci_client import RegistryClient

BUILD = Path(__file__).resolve().parent / "build" / "images.sh"


def base_images() -> Path:
    """The folder of image layouts (``debian-python``, ``pause``), built when missing."""
    out = subprocess.run([str(BUILD)], stdout=subprocess.PIPE, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


class FileSource:
    """A blob of the layout, read from its file (a :class:`BlobSource`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def size(self) -> int:
        return self.path.stat().st_size

    def read(self, offset: int, n: int) -> bytes:
        with self.path.open("rb") as f:
            f.seek(offset)
            return f.read(n)


def push_layout(layout: Path, host: str, repo: str, tag: str) -> str:
    """Push the layout's one image (its blobs, then its manifest) -> ``HOST/REPO:TAG``."""
    index = json.loads((layout / "index.json").read_text())
    desc = index["manifests"][0]
    blobs = layout / "blobs" / "sha256"
    manifest_bytes = (blobs / desc["digest"].split(":", 1)[1]).read_bytes()
    manifest = json.loads(manifest_bytes)
    with RegistryClient(host) as client:
        for d in [manifest["config"], *manifest["layers"]]:
            client.upload_blob(repo, d["digest"], FileSource(blobs / d["digest"].split(":", 1)[1]))
        client.put_manifest(repo, tag, manifest_bytes, desc["mediaType"])
    return f"{host}/{repo}:{tag}"
