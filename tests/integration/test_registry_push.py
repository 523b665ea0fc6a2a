"""Push the code image to a real registry and read it back with third-party tools.

skopeo inspects and copies the pushed image to an OCI layout, umoci unpacks it, and the
captured program runs from the unpacked root filesystem with the local Python: its output must
equal what the same program prints here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from jupyter_ktrain.errors import RegistryError
from jupyter_ktrain.packaging.layer import LayerCache
from jupyter_ktrain.packaging.push import push_code_image

from .conftest import PASSWORD, USER
from .registry_tools import FaultProxy, Registry, make_wheel, push_base_image

PROGRAM = b"""\
import json, os, sys
import basemod                      # from the base image's layer (/opt/base)
from jupyter_ktrain.pod import launch   # from the code layer's lib dir (/ktrain/lib)
cfg = json.load(open("ds_config.json"))
try:
    import tinypkg
    extra = tinypkg.VALUE
except ImportError:
    extra = None
print(json.dumps({"greeting": basemod.GREETING, "stage": cfg["zero_optimization"]["stage"],
                  "code_dir": launch.CODE_DIR, "sum": sum(range(10)), "extra": extra}))
"""
FILES = {"program.py": PROGRAM, "ds_config.json": b'{"zero_optimization": {"stage": 2}}'}
needs_tools = pytest.mark.skipif(
    not (shutil.which("skopeo") and shutil.which("umoci")), reason="skopeo/umoci not installed"
)


def _skopeo(*args: str) -> str:
    return subprocess.run(
        ["skopeo", "--insecure-policy", *args], capture_output=True, text=True, check=True
    ).stdout


def _unpack(ref: str, tmp: Path) -> tuple[Path, dict[str, object]]:
    """skopeo copy -> OCI layout -> umoci unpack; returns (rootfs, image config)."""
    _skopeo("copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{tmp / 'layout'}:img")
    subprocess.run(
        ["umoci", "unpack", "--rootless", "--image", f"{tmp / 'layout'}:img", str(tmp / "bundle")],
        capture_output=True,
        check=True,
    )
    config = json.loads(_skopeo("inspect", "--tls-verify=false", "--config", f"docker://{ref}"))
    return tmp / "bundle" / "rootfs", config


def _run_from_rootfs(rootfs: Path, config: dict[str, object], extra_path: str = "") -> str:
    """Run /ktrain/program.py as the pod would: image env, WorkingDir, PYTHONPATH remapped."""
    cfg = config["config"]
    assert isinstance(cfg, dict)
    env = dict(e.split("=", 1) for e in cfg["Env"])
    pythonpath = [str(rootfs) + p for p in env["PYTHONPATH"].split(":")]
    run_env = {"PATH": os.environ["PATH"], "PYTHONPATH": ":".join([*pythonpath, extra_path])}
    workdir = rootfs / cfg["WorkingDir"].lstrip("/")
    return subprocess.run(
        [sys.executable, "program.py"],
        cwd=workdir,
        env=run_env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _local_output(tmp: Path) -> str:
    """What the program prints run here (kernel side), with the base module on the path."""
    (tmp / "local").mkdir()
    (tmp / "local" / "basemod.py").write_text("GREETING = 'hello from the base image'\n")
    for name, data in FILES.items():
        (tmp / "local" / name).write_bytes(data)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{tmp / 'local'}:{Path.cwd()}"}
    return subprocess.run(
        [sys.executable, "program.py"],
        cwd=tmp / "local",
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.mark.slow
@needs_tools
def test_pushed_image_reads_back_with_skopeo_and_umoci_and_runs(
    registry: Registry, base_image: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    base = base_image.replace(registry.host, proxy.host)
    cache = LayerCache(tmp_path / "cache")
    progress: list[tuple[int, int, str]] = []
    result = push_code_image(
        base, f"{proxy.host}/team/run", FILES, cache=cache, progress=lambda *a: progress.append(a)
    )
    assert result.uploaded
    assert len(result.mounted) == 2
    assert not result.copied
    assert progress[-1][0] == progress[-1][1]
    layer = cache.get(result.layer_digest)
    assert layer is not None
    manifest = json.loads(
        _skopeo("inspect", "--tls-verify=false", "--raw", f"docker://{result.reference}")
    )
    config_size = manifest["config"]["size"]
    assert proxy.uploaded["blob"] == len(layer) + config_size
    assert proxy.uploaded["manifest"] == result.bytes_uploaded - result.blob_bytes_uploaded

    inspect = json.loads(_skopeo("inspect", "--tls-verify=false", f"docker://{result.reference}"))
    assert inspect["Digest"] == result.digest
    assert len(inspect["Layers"]) == 3
    assert inspect["Layers"][-1] == result.layer_digest
    rootfs, config = _unpack(result.reference, tmp_path)
    assert (rootfs / "etc" / "base-release").read_text() == "tiny-base 1\n"
    assert _run_from_rootfs(rootfs, config) == _local_output(tmp_path)


@pytest.mark.slow
def test_rerun_with_unchanged_code_uploads_nothing_and_a_change_uploads_only_the_layer(
    registry: Registry, base_image: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    base = base_image.replace(registry.host, proxy.host)
    target = f"{proxy.host}/team/rerun"
    first = push_code_image(base, target, FILES, cache=LayerCache(tmp_path / "a"))
    proxy.reset()
    again = push_code_image(base, target, FILES, cache=LayerCache(tmp_path / "b"))
    assert again.digest == first.digest  # same files on a fresh cache: same image
    assert not again.uploaded
    assert again.bytes_uploaded == 0
    assert sum(proxy.uploaded.values()) == 0
    assert "Nothing uploaded" in again.message()

    proxy.reset()
    changed = push_code_image(base, target, {**FILES, "program.py": PROGRAM + b"# v2\n"})
    assert changed.digest != first.digest
    assert changed.uploaded
    assert len(changed.pushed) == 2
    assert len(changed.present) == 2
    assert proxy.uploaded["blob"] == changed.blob_bytes_uploaded


@pytest.mark.slow
@needs_tools
def test_offline_requirements_ship_as_wheels_and_install_without_an_index(
    registry: Registry, base_image: str, tmp_path: Path
) -> None:
    index = tmp_path / "index"
    make_wheel(index, "tinypkg", "1.0", "VALUE = 42\n")
    result = push_code_image(
        base_image,
        f"{registry.host}/team/offline",
        FILES,
        requirements=["tinypkg==1.0"],
        offline=True,
        pip_args=["--no-index", "--find-links", str(index)],
        cache=LayerCache(tmp_path / "cache"),
    )
    assert result.requirements_route == "wheels"
    rootfs, config = _unpack(result.reference, tmp_path)
    code = rootfs / "ktrain"
    assert (code / "requirements.txt").read_text() == "tinypkg==1.0\n"
    site = tmp_path / "site"
    subprocess.run(  # what pod_install runs, into a target dir instead of the image's Python
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(code / "wheels"),
            "--target",
            str(site),
            "-r",
            str(code / "requirements.txt"),
        ],
        check=True,
        capture_output=True,
    )
    out = json.loads(_run_from_rootfs(rootfs, config, extra_path=str(site)))
    assert out["extra"] == 42


@pytest.mark.slow
def test_oci_index_base_picks_amd64_and_keeps_oci_media_types(
    registry: Registry, tmp_path: Path
) -> None:
    push_base_image(registry.host, "base/multi", [{"/a": b"a"}], oci=True, index=True)
    result = push_code_image(
        f"{registry.host}/base/multi",
        f"{registry.host}/team/multi",
        FILES,
        cache=LayerCache(tmp_path),
    )
    resp = httpx.get(
        f"http://{registry.host}/v2/team/multi/manifests/{result.digest}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    manifest = resp.json()
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["layers"][-1]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"


@pytest.mark.slow
def test_htpasswd_registry_with_docker_config_credentials_and_cross_registry_copy(
    registry: Registry,
    auth_registry: Registry,
    base_image: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = f"{auth_registry.host}/team/secure"
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"auths": {}}))
    with pytest.raises(RegistryError, match="docker login") as err:
        push_code_image(base_image, target, FILES, cache=LayerCache(tmp_path / "c"))
    assert err.value.code == "UNAUTHORIZED"

    import base64

    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (tmp_path / "config.json").write_text(
        json.dumps({"auths": {auth_registry.host: {"auth": auth}}})
    )
    progress: list[tuple[int, int, str]] = []
    result = push_code_image(
        base_image,
        target,
        FILES,
        cache=LayerCache(tmp_path / "c"),
        progress=lambda *a: progress.append(a),
    )
    assert len(result.copied) == 2  # base lives on another registry: copied, with progress
    assert any(w.startswith("base layer") for _, _, w in progress)
    resp = httpx.head(
        f"http://{auth_registry.host}/v2/team/secure/manifests/{result.digest}",
        auth=(USER, PASSWORD),
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    assert resp.status_code == 200
