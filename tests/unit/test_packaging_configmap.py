"""The ConfigMap route: valid keys, nested paths restored by items, size limit."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from jupyter_ktrain.errors import PackagingError
from jupyter_ktrain.packaging.configmap import code_volume, render_code_configmap
from jupyter_ktrain.packaging.layer import code_files

FILES = {"program.py": b"print('hi')\n", "ds_config.json": b"{}", "data/w.bin": b"\x00\xff\x80"}


def _project(cm: dict, volume: dict, root: Path) -> None:
    """Write the files as the kubelet would: each item's key at its path under the mount."""
    values = {**cm.get("data", {}), **cm.get("binaryData", {})}
    for item in volume["configMap"]["items"]:
        raw = values[item["key"]]
        data = base64.b64decode(raw) if item["key"] in cm.get("binaryData", {}) else raw.encode()
        dest = root / item["path"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def test_keys_are_valid_and_items_rebuild_the_code_dir(tmp_path: Path) -> None:
    cm = render_code_configmap("job-code", "team", FILES)
    keys = [*cm.get("data", {}), *cm.get("binaryData", {})]
    assert all(re.fullmatch(r"[-._a-zA-Z0-9]{1,253}", k) for k in keys)
    assert list(cm["binaryData"]) == ["data__w.bin"]
    volume, mount, env = code_volume(cm)
    assert mount == {"name": "ktrain-code", "mountPath": "/ktrain", "readOnly": True}
    assert env == [{"name": "PYTHONPATH", "value": "/ktrain/lib"}]
    _project(cm, volume, tmp_path)
    want = {p.removeprefix("/ktrain/"): d for p, d in code_files(FILES).items()}
    got = {str(p.relative_to(tmp_path)): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert got == want
    assert "lib/jupyter_ktrain/pod/agent/__main__.py" in got


def test_manifests_validate_against_the_kubernetes_schema() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    cm = render_code_configmap("job-code", "team", FILES, labels={"ktrain/job": "j1"})
    volume, mount, env = code_volume(cm)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {
            "volumes": [volume],
            "containers": [{"name": "c", "image": "busybox", "volumeMounts": [mount], "env": env}],
        },
    }
    for obj in (cm, pod):
        kubernetes_validate.validate(obj, "1.30", strict=True)


def test_over_the_limit_names_the_registry_option() -> None:
    big = {"program.py": b"x = 1\n", "weights.bin": bytes(range(256)) * 4096}
    with pytest.raises(
        PackagingError, match=r"weights.bin.*`%ktrain config registry=REGISTRY/REPO`"
    ):
        render_code_configmap("job-code", "team", big)


def test_files_outside_the_code_dir_cannot_travel() -> None:
    with pytest.raises(PackagingError, match="outside /ktrain"):
        render_code_configmap("c", "ns", {"/etc/x": b"x"})
