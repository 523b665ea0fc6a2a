"""A deterministic, content-addressed image layer built from in-memory files.

Contract: the same ``files`` (and ``modes``) give byte-identical layer bytes, and so the same
``digest``, on any machine and any day. What makes it so:

- entries sorted by path, every parent directory present once (mode 0755);
- mtime fixed at ``MTIME`` (0), uid/gid 0, empty user/group names, PAX/USTAR tar;
- gzip written by hand: fixed 10-byte header (mtime 0, no file name, OS 255) around a raw
  deflate stream at a fixed level, so neither the clock nor a file name leaks in.

``digest`` is the sha256 of the compressed bytes (what the manifest names), ``diff_id`` the
sha256 of the uncompressed tar (what the image config's ``rootfs.diff_ids`` lists).
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import tarfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import PackagingError
from ..pod.launch import CODE_DIR, LIB_DIR

__all__ = [
    "MTIME",
    "Layer",
    "LayerCache",
    "build_layer",
    "code_files",
    "gzip_deterministic",
    "runner_files",
    "sha256_digest",
]

MTIME = 0
FILE_MODE = 0o644
DIR_MODE = 0o755
_LEVEL = 6
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Layer:
    """A compressed layer: ``data`` is what gets uploaded."""

    data: bytes
    digest: str
    diff_id: str
    size: int

    @property
    def uncompressed_size(self) -> int:
        """Not stored; recomputed on demand (used by tests and reports only)."""
        return len(zlib.decompress(self.data, wbits=31))


def sha256_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def gzip_deterministic(data: bytes, level: int = _LEVEL) -> bytes:
    """gzip member with mtime 0, no name, OS=255: equal input -> equal output."""
    header = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff"
    comp = zlib.compressobj(level, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY)
    body = comp.compress(data) + comp.flush()
    trailer = struct.pack("<II", zlib.crc32(data) & 0xFFFFFFFF, len(data) & 0xFFFFFFFF)
    return header + body + trailer


def _normalize(path: str) -> str:
    """Image path -> tar member name (relative, no ``.``/``..``, no empty parts)."""
    parts = PurePosixPath("/" + path.lstrip("/")).parts[1:]
    if not parts or any(p in ("..", ".") for p in parts) or "\\" in path:
        raise PackagingError(
            f"Cannot place {path!r} in the code layer: paths must name a file inside the image "
            "without '..' or '.' parts (e.g. '/ktrain/program.py')."
        )
    return "/".join(parts)


def _dir_info(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = DIR_MODE
    return _fix(info)


def _fix(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_tar(files: Mapping[str, bytes], modes: Mapping[str, int] | None = None) -> bytes:
    """The uncompressed, deterministic tar stream of ``files`` (see module docstring)."""
    modes = {_normalize(k): v for k, v in (modes or {}).items()}
    entries = {_normalize(k): v for k, v in files.items()}
    if len(entries) != len(files):
        raise PackagingError("Two code files map to the same path inside the image.")
    dirs = {str(p) for name in entries for p in PurePosixPath(name).parents if str(p) != "."}
    clash = dirs & entries.keys()
    if clash:
        raise PackagingError(f"{sorted(clash)[0]!r} is both a file and a directory in the layer.")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(dirs | entries.keys()):
            if name in dirs:
                tar.addfile(_dir_info(name + "/"))
                continue
            data = entries[name]
            info = _fix(tarfile.TarInfo(name))
            info.size = len(data)
            info.mode = modes.get(name, FILE_MODE)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_layer(files: Mapping[str, bytes], modes: Mapping[str, int] | None = None) -> Layer:
    """Deterministic gzip'd tar layer of ``files`` (image path -> bytes; ``modes`` optional)."""
    raw = build_tar(files, modes)
    data = gzip_deterministic(raw)
    return Layer(data=data, digest=sha256_digest(data), diff_id=sha256_digest(raw), size=len(data))


class LayerCache:
    """Content-addressed store of layer blobs: ``<root>/sha256/<hex>``, written atomically.

    A hit means the exact bytes are at hand (checked by digest on read), so a rerun does not
    rebuild wheels or re-gzip; corrupt entries are dropped and treated as misses.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None):
        default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        self.root = Path(root) if root is not None else default / "jupyter-ktrain" / "blobs"

    def _path(self, digest: str) -> Path:
        algo, _, hexpart = digest.partition(":")
        if algo != "sha256" or len(hexpart) != 64:
            raise PackagingError(f"Not a sha256 digest: {digest!r}.")
        return self.root / algo / hexpart

    def get(self, digest: str) -> bytes | None:
        """The blob with ``digest``, or None when absent or corrupt."""
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        if sha256_digest(data) != digest:
            path.unlink(missing_ok=True)
            return None
        return data

    def put(self, data: bytes) -> str:
        """Store ``data``; returns its digest."""
        digest = sha256_digest(data)
        path = self._path(digest)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            tmp.replace(path)
        return digest

    def layer(self, files: Mapping[str, bytes], modes: Mapping[str, int] | None = None) -> Layer:
        """``build_layer`` that also stores the blob (for later copies / inspection)."""
        layer = build_layer(files, modes)
        self.put(layer.data)
        return layer


def runner_files(lib_dir: str = LIB_DIR) -> dict[str, bytes]:
    """The pod side of this package at ``{lib_dir}/jupyter_ktrain/...``: its ``__init__``
    (which imports only the pod side eagerly) and everything under ``pod/`` (standard library
    only); the notebook side stays home.

    With ``PYTHONPATH={lib_dir}`` the pod runs ``python -m jupyter_ktrain.pod.agent`` without
    installing us; user code can ``import jupyter_ktrain as ktrain; ktrain.report(...)``.
    """
    paths = [_PACKAGE_ROOT / "__init__.py", *sorted((_PACKAGE_ROOT / "pod").rglob("*.py"))]
    return {
        f"{lib_dir}/jupyter_ktrain/{path.relative_to(_PACKAGE_ROOT).as_posix()}": path.read_bytes()
        for path in paths
        if "__pycache__" not in path.parts
    }


def code_files(
    files: Mapping[str, bytes], *, code_dir: str = CODE_DIR, include_runner: bool = True
) -> dict[str, bytes]:
    """Job files as image paths: relative keys go under ``code_dir``; plus the runner lib."""
    out = runner_files(f"{code_dir}/lib") if include_runner else {}
    for key, data in files.items():
        path = key if key.startswith("/") else f"{code_dir}/{key}"
        out["/" + _normalize(path)] = data
    return out
