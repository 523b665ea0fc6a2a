"""The code layer is deterministic, well-formed, and carries the runner library."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from jupyter_ktrain.errors import PackagingError
from jupyter_ktrain.packaging.layer import (
    LayerCache,
    build_layer,
    code_files,
    runner_files,
    sha256_digest,
)

FILES = {
    "/ktrain/program.py": b"print('hello')\n",
    "/ktrain/ds_config.json": b'{"zero_optimization": {"stage": 2}}\n',
    "/ktrain/lib/pkg/__init__.py": b"",
    "/ktrain/run.sh": b"#!/bin/sh\necho hi\n",
}


def _members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return tar.getmembers()


def test_same_files_in_any_order_give_the_same_digest() -> None:
    a = build_layer(FILES, {"/ktrain/run.sh": 0o755})
    b = build_layer(dict(reversed(FILES.items())), {"ktrain/run.sh": 0o755})
    assert a == b
    assert a.digest == sha256_digest(a.data)
    assert a.size == len(a.data)
    assert a.diff_id == sha256_digest(gzip.decompress(a.data))
    assert build_layer({**FILES, "/ktrain/program.py": b"print(1)\n"}).digest != a.digest


def test_entries_are_sorted_with_parents_fixed_times_root_owner_and_modes() -> None:
    layer = build_layer(FILES, {"/ktrain/run.sh": 0o755})
    members = _members(layer.data)
    names = [m.name for m in members]
    assert names == sorted(names)
    assert names == [
        "ktrain",
        "ktrain/ds_config.json",
        "ktrain/lib",
        "ktrain/lib/pkg",
        "ktrain/lib/pkg/__init__.py",
        "ktrain/program.py",
        "ktrain/run.sh",
    ]
    for m in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", "")
    modes = {m.name: (m.type, m.mode) for m in members}
    assert modes["ktrain/lib"] == (tarfile.DIRTYPE, 0o755)
    assert modes["ktrain/run.sh"] == (tarfile.REGTYPE, 0o755)
    assert modes["ktrain/program.py"] == (tarfile.REGTYPE, 0o644)


def test_gzip_header_has_no_time_and_no_file_name() -> None:
    data = build_layer(FILES).data
    assert data[:4] == b"\x1f\x8b\x08\x00"  # deflate, no FNAME/FEXTRA flags
    assert data[4:8] == b"\x00\x00\x00\x00"  # mtime 0
    assert data[9] == 0xFF


@pytest.mark.parametrize("bad", ["/ktrain/../etc/passwd", "/", "../x", ""])
def test_paths_escaping_or_empty_are_refused(bad: str) -> None:
    with pytest.raises(PackagingError, match="Cannot place"):
        build_layer({bad: b"x"})


def test_a_path_cannot_be_both_file_and_directory() -> None:
    with pytest.raises(PackagingError, match="both a file and a directory"):
        build_layer({"/ktrain/a": b"x", "/ktrain/a/b": b"y"})


def test_runner_files_are_exactly_the_init_and_the_pod_package() -> None:
    """What travels to the pod is ``jupyter_ktrain/__init__.py`` and ``jupyter_ktrain/pod/**``:
    nothing of the notebook side, nothing of the pod side left behind."""
    root = Path(__file__).resolve().parents[2] / "jupyter_ktrain"
    pod = {p.relative_to(root).as_posix() for p in (root / "pod").rglob("*.py")}
    want = {"__init__.py"} | {p for p in pod if "__pycache__" not in p}
    files = runner_files()
    assert set(files) == {f"/ktrain/lib/jupyter_ktrain/{p}" for p in want}
    assert "/ktrain/lib/jupyter_ktrain/pod/agent/__main__.py" in files
    here = root / "pod" / "launch.py"
    assert files["/ktrain/lib/jupyter_ktrain/pod/launch.py"] == here.read_bytes()


def test_code_files_put_relative_paths_in_the_code_dir() -> None:
    files = code_files({"program.py": b"p", "/etc/extra.conf": b"e"})
    assert files["/ktrain/program.py"] == b"p"
    assert files["/etc/extra.conf"] == b"e"
    assert "/ktrain/lib/jupyter_ktrain/pod/launch.py" in files
    assert code_files({"program.py": b"p"}, include_runner=False) == {"/ktrain/program.py": b"p"}


def test_cache_is_content_addressed_and_drops_corrupt_entries(tmp_path: Path) -> None:
    cache = LayerCache(tmp_path)
    layer = cache.layer(FILES)
    assert cache.get(layer.digest) == layer.data
    path = tmp_path / "sha256" / layer.digest.split(":")[1]
    path.write_bytes(b"garbage")
    assert cache.get(layer.digest) is None
    assert not path.exists()
    assert cache.get(sha256_digest(b"never stored")) is None
