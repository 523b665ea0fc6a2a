"""Appending the code layer to a base image's manifest and config (pure, no network)."""

from __future__ import annotations

import copy
import json

import pytest

from jupyter_ktrain.errors import PackagingError
from jupyter_ktrain.packaging import image as im
from jupyter_ktrain.packaging.layer import build_layer, sha256_digest


def _base(oci: bool = False, env: list[str] | None = None) -> im.Image:
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "2024-03-01T00:00:00Z",
        "config": {"Env": env or ["PATH=/usr/bin", "PYTHONPATH=/opt/base:/opt/more"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "1" * 64]},
        "history": [{"created_by": "base"}],
    }
    cb = im.canonical_json(config)
    mt, lt, ct = (
        (im.OCI_MANIFEST, im.OCI_LAYER, im.OCI_CONFIG)
        if oci
        else (im.DOCKER_MANIFEST, im.DOCKER_LAYER, im.DOCKER_CONFIG)
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": mt,
        "config": {"mediaType": ct, "digest": sha256_digest(cb), "size": len(cb)},
        "layers": [{"mediaType": lt, "digest": "sha256:" + "2" * 64, "size": 10}],
    }
    return im.Image.parse(json.dumps(manifest).encode(), cb)


LAYER = build_layer({"/ktrain/program.py": b"print(1)\n"})


@pytest.mark.parametrize("oci", [False, True])
def test_append_adds_layer_diff_id_history_env_and_workdir(oci: bool) -> None:
    base = _base(oci)
    before = (copy.deepcopy(dict(base.manifest)), copy.deepcopy(dict(base.config)))
    new = im.append_layer(base, LAYER, env={"KTRAIN_JOB": "x"})
    assert (dict(base.manifest), dict(base.config)) == before  # inputs untouched
    layers = new.manifest["layers"]
    assert len(layers) == 2
    assert layers[0] == base.layers[0]
    assert layers[1] == {
        "mediaType": im.OCI_LAYER if oci else im.DOCKER_LAYER,
        "digest": LAYER.digest,
        "size": LAYER.size,
    }
    assert new.media_type == (im.OCI_MANIFEST if oci else im.DOCKER_MANIFEST)
    cfg = json.loads(new.config_bytes)
    assert cfg["rootfs"]["diff_ids"][-1] == LAYER.diff_id
    assert len(cfg["history"]) == 2
    assert cfg["config"]["WorkingDir"] == "/ktrain"
    assert cfg["config"]["Env"] == [
        "PATH=/usr/bin",
        "PYTHONPATH=/ktrain/lib:/opt/base:/opt/more",
        "KTRAIN_JOB=x",
    ]
    assert cfg["created"] == "2024-03-01T00:00:00Z"
    desc = json.loads(new.manifest_bytes)["config"]
    assert desc["digest"] == sha256_digest(new.config_bytes) == new.config_digest
    assert desc["size"] == len(new.config_bytes)
    assert new.layers_data[LAYER.digest] == LAYER.data


def test_append_is_deterministic_and_idempotent_on_pythonpath() -> None:
    a = im.append_layer(_base(), LAYER)
    assert a.digest == im.append_layer(_base(), LAYER).digest
    twice = im.append_layer(a, LAYER)
    env = json.loads(twice.config_bytes)["config"]["Env"]
    assert "PYTHONPATH=/ktrain/lib:/opt/base:/opt/more" in env


def test_pythonpath_is_set_when_the_base_has_none() -> None:
    new = im.append_layer(_base(env=["PATH=/bin"]), LAYER)
    assert json.loads(new.config_bytes)["config"]["Env"] == ["PATH=/bin", "PYTHONPATH=/ktrain/lib"]


def test_select_platform_picks_linux_amd64_by_default_and_names_what_exists() -> None:
    index = {
        "manifests": [
            {
                "digest": "sha256:a",
                "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
            },
            {"digest": "sha256:b", "platform": {"os": "linux", "architecture": "amd64"}},
        ]
    }
    assert im.select_platform(index)["digest"] == "sha256:b"
    assert im.select_platform(index, "linux/arm64/v8")["digest"] == "sha256:a"
    with pytest.raises(
        PackagingError, match=r"no linux/s390x variant .*linux/arm64/v8, linux/amd64"
    ):
        im.select_platform(index, "linux/s390x")


def test_parse_refuses_a_config_that_does_not_match_the_manifest() -> None:
    base = _base()
    with pytest.raises(PackagingError, match="config digest"):
        im.Image.parse(base.manifest_bytes, base.config_bytes + b" ")


def test_parse_refuses_schema1_manifests() -> None:
    m = {"schemaVersion": 1, "mediaType": "application/vnd.docker.distribution.manifest.v1+json"}
    with pytest.raises(PackagingError, match="only Docker v2 schema 2 and OCI"):
        im.Image.parse(json.dumps(m).encode(), b"{}")
