"""Secrets never travel in code (issue 12): a unique token planted in a notebook global, a
default argument, a nested dict, a dataclass field and the cell itself is refused on every
route (local job folder, local dry run, the Kubernetes dry run, the ConfigMap route, the
registry route), with the fix; a byte search of everything the product wrote (its home, the
cell outputs, the side panel's API) finds no canary. With ``--env`` (local) or
``--secret-env`` (Kubernetes) the same training reads the token from the environment."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from jupyter_ktrain import SecretError

pytestmark = pytest.mark.slow

CANARY = "hf_" + secrets.token_hex(17)

PLANTED = [
    "%load_ext jupyter_ktrain",
    f"import dataclasses\nHF_TOKEN = {CANARY!r}",
    "def train_global():\n    return len(HF_TOKEN)",
    f"def train_default(token={CANARY!r}):\n    return len(token)",
    f"CONFIG = {{'model': 'gpt2', 'hub': {{'auth': {CANARY!r}}}}}\n"
    "def train_dict():\n    return len(CONFIG['hub']['auth'])",
    "@dataclasses.dataclass\nclass Settings:\n    model: str = 'gpt2'\n    hub_token: str = ''\n"
    f"SETTINGS = Settings(hub_token={CANARY!r})\n"
    "def train_dataclass():\n    return len(SETTINGS.hub_token)",
]
# what the user is told, per planted place (execution counts: cell [2] is PLANTED[1], ...)
SPOTS = {
    "result = train_global()": ["'HF_TOKEN' (cell [2]) is a secret", "--secret-env HF_TOKEN="],
    "result = train_default()": ["default of token (line 1) in 'train_default' (cell [4])"],
    "result = train_dict()": ["CONFIG['hub']['auth'] in 'CONFIG' (cell [5])"],
    "result = train_dataclass()": ["SETTINGS.hub_token in 'SETTINGS' (cell [6])"],
    f"result = len({CANARY!r})": [
        "line 1 in the %%ktrain cell",
        "--secret-env HF_TOKEN=hf-token/token",
        "--allow-secret HF_TOKEN.",
    ],
}
ROUTES = {
    "local job folder": "--name leak-local",
    "local dry run": "--dry-run",
    "kubernetes dry run": "--backend kubernetes --image python:3.12 --dry-run",
    "configmap": "--backend kubernetes --image python:3.12 --name leak-cm",
}
REGISTRY_ROUTES = {
    "registry": "--backend kubernetes --name leak-reg",
    "registry dry run": "--backend kubernetes --dry-run",
}


def _notebook(path: Path, cells: list[str]) -> Any:
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)


def _refusal(outputs: list[Any]) -> str:
    """The cell's one-line refusal, as the kernel shows it (an error or a UsageError line)."""
    parts = [o.get("text", "") for o in outputs if o.get("name") == "stderr"]
    parts += [o["evalue"] for o in outputs if o.get("output_type") == "error"]
    assert not any(o.get("name") == "stdout" for o in outputs), outputs  # nothing started
    return "".join(parts)


def _written(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def test_a_planted_token_is_refused_on_every_route_and_written_nowhere(
    tmp_path: Path, ktrain_home: Path
) -> None:
    from nbclient import NotebookClient

    from jupyter_ktrain.server.core import PanelCore

    cells = list(PLANTED)
    expected: list[tuple[int, str, list[str]]] = []
    for routes in (ROUTES, REGISTRY_ROUTES):
        if routes is REGISTRY_ROUTES:  # the code layer would go to a registry from here on
            cells.append("%ktrain config registry=127.0.0.1:9/ktrain/code base_image=python:3.12")
        for route, flags in routes.items():
            for body, fragments in SPOTS.items():
                expected.append((len(cells), route, fragments))
                cells.append(f"%%ktrain {flags}\n{body}")
    nb = _notebook(tmp_path / "leak.ipynb", cells)
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()

    for index, route, fragments in expected:
        message = _refusal(nb.cells[index].outputs)
        assert message.count("ktrain: ") == 1, (route, cells[index], message)
        for fragment in [*fragments, "nothing was created", "--env ", "--allow-secret "]:
            assert fragment in message, (route, message)
    assert not (ktrain_home / "jobs").exists() or not any((ktrain_home / "jobs").iterdir())

    shown = json.dumps([c.get("outputs", []) for c in nb.cells]).encode()
    panel = PanelCore.from_names(["local"])
    api = json.dumps(panel.jobs()).encode()
    for place, data in {"files": _written(ktrain_home), "cells": shown, "panel": api}.items():
        assert CANARY.encode() not in data, place


def test_with_env_the_local_job_reads_the_token_and_writes_it_nowhere(
    tmp_path: Path, ktrain_home: Path
) -> None:
    from nbclient import NotebookClient

    from jupyter_ktrain.server.core import PanelCore

    cells = [
        *PLANTED[:3],
        # the global is read from the job's environment; nothing of it is written down
        "%%ktrain --env HF_TOKEN --name with-env\nresult = train_global()",
        "print('RESULT', result)",
        "%%ktrain --backend kubernetes --image python:3.12 --secret-env HF_TOKEN=hf-token/token"
        " --dry-run\nresult = train_global()",
        "print(_.plan.program.source)",
    ]
    nb = _notebook(tmp_path / "env.ipynb", cells)
    NotebookClient(nb, timeout=180, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert f"RESULT {len(CANARY)}" in text
    assert "Set from rank 0: result" in text  # set only when the job succeeded
    rendered = "".join(o.get("text", "") for o in nb.cells[5].outputs)
    assert "secretKeyRef" in rendered
    assert "hf-token" in rendered
    program = "".join(o.get("text", "") for o in nb.cells[6].outputs)
    assert "HF_TOKEN = __import__('os').environ['HF_TOKEN']" in program

    panel = PanelCore.from_names(["local"])
    api = json.dumps([panel.jobs(), panel.job("with-env"), panel.logs("with-env")]).encode()
    shown = json.dumps([c.get("outputs", []) for c in nb.cells]).encode()
    for place, data in {"files": _written(ktrain_home), "cells": shown, "panel": api}.items():
        assert CANARY.encode() not in data, place


def test_with_secret_env_the_cluster_job_reads_a_real_secret(
    test_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept small on purpose: the test cluster fixture is being replaced."""
    pytest.importorskip("kubernetes")
    from .k8s_helpers import configured_shell

    shells = configured_shell(test_cluster, tmp_path, monkeypatch)
    shell = next(shells)
    for cell in PLANTED[1:3]:
        assert shell.run_cell(cell, store_history=True).success
    made = test_cluster.kubectl(
        "create", "secret", "generic", "hf-token", f"--from-literal=token={CANARY}"
    )
    assert made.returncode == 0, made.stderr
    job = shell.run_cell_magic(
        "ktrain",
        "--image local/python --name with-secret --secret-env HF_TOKEN=hf-token/token",
        "result = train_global()\n",
    )
    assert job.state == "Succeeded"
    assert shell.user_ns["result"] == len(CANARY)
    for kind, name in (("configmap", "with-secret-code"), ("pytorchjob", "with-secret")):
        got = test_cluster.kubectl("get", kind, name, "-o", "yaml")
        assert got.returncode == 0, got.stderr
        assert CANARY not in got.stdout, kind
    next(shells, None)  # the fixture body resets the shell


@pytest.mark.skipif(
    not (shutil.which("skopeo") and shutil.which("umoci")), reason="skopeo/umoci not installed"
)
def test_registry_route_code_layer_holds_no_token_and_reads_it_from_the_environment(
    registry: Any, base_image: str, tmp_path: Path
) -> None:
    """The code image the registry route pushes for a cell using HF_TOKEN with --secret-env,
    read back with skopeo and unpacked with umoci: no canary in the layout, the unpacked files
    or the registry's storage; the program run from the rootfs reads the token from its
    environment."""
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_ktrain.capture import capture
    from jupyter_ktrain.packaging.push import push_code_image

    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    for cell in PLANTED[1:3]:
        assert sh.run_cell(cell, store_history=True).success
    args = (sh.user_ns, sh.user_ns["In"], sh.user_ns_hidden)
    with pytest.raises(SecretError):  # without the flag nothing is built
        capture("result = train_global()", *args)
    program = capture("print('LEN', train_global())", *args, from_env=["HF_TOKEN"])
    sh.reset(new_session=True)
    pushed = push_code_image(
        base_image, f"{registry.host}/team/secret", program.files, insecure=[registry.host]
    )
    ref = pushed.reference
    run = ["skopeo", "--insecure-policy"]
    layout = tmp_path / "layout"
    subprocess.run(
        [*run, "copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{layout}:img"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["umoci", "unpack", "--rootless", "--image", f"{layout}:img", str(tmp_path / "bundle")],
        check=True,
        capture_output=True,
    )
    code = tmp_path / "bundle" / "rootfs" / "ktrain"
    assert (code / "program.py").exists()
    for place in (layout, tmp_path / "bundle", registry.root):
        assert CANARY.encode() not in _written(place), place
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(code / "lib"), "HF_TOKEN": CANARY}
    out = subprocess.run(
        [sys.executable, "program.py"], cwd=code, env=env, capture_output=True, text=True
    )
    assert f"LEN {len(CANARY)}" in out.stdout, out.stderr
