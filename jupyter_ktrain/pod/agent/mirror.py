"""A warm pod's copy of its job's code ConfigMap: the run folder the warm agent reads.

On Kubernetes a warm job's runs are ordered through its code ConfigMap: the notebook replaces
its data with the new run's files and its ``ktrain.io/warm-control`` annotation with
``{"run": N, "seq": Q, "abort": {"N": "why"}, "idle_limit_s": S}`` (``seq`` counts every
change: a run, an abort, an idle limit). The pods never read the API (they hold no token):
the order reaches them two ways, both ending in :func:`apply`, which mirrors a ConfigMap into
the run folder the warm agent reads (:class:`~.warm.FolderControl`), the layout the local
backend writes itself: ``runs/N/code/...`` (the run's files, rebuilt from the flat keys),
``runs/N/abort`` and, last, ``control.json``. So the agent has one way to receive runs on
every backend.

- At the pod's start, :func:`seed`: the kubelet mounts the ConfigMap at ``/ktrain`` (its
  data, with the order itself as the file :data:`CONTROL_PATH`), and a fresh run folder is
  filled from that mount. That is how run 1 starts: with no kernel involved, so a
  ``--detach``ed cell, a kernel that exits, or pods that are scheduled an hour later (a
  queue, an image pull) still run it. A pod made anew later (its order names run N > 1)
  records run N as already ordered and joins at the next run.
- Every later change, :mod:`.deliver`: the kernel execs it in every pod with the signed
  ConfigMap on stdin.

Standard library only.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "CONFIGMAP_ENV",
    "CONTROL_ANNOTATION",
    "CONTROL_ENV",
    "CONTROL_KEY",
    "CONTROL_PATH",
    "PATHS_ANNOTATION",
    "apply",
    "folder_lock",
    "folder_seq",
    "mounted_configmap",
    "seed",
]

CONFIGMAP_ENV = "KTRAIN_WARM_CONFIGMAP"
CONTROL_ENV = "KTRAIN_WARM_CONTROL"  # the run folder (an emptyDir on Kubernetes)
CONTROL_ANNOTATION = "ktrain.io/warm-control"
PATHS_ANNOTATION = "ktrain.jupyter.org/paths"  # key=path lines (packaging.configmap)
# the order again, as a data key: the kubelet mounts data, not annotations
CONTROL_KEY = "ktrain-warm-control.json"
CONTROL_PATH = ".ktrain-warm-control.json"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def apply(configmap: Mapping[str, Any], folder: Path) -> int | None:
    """Mirror ``configmap`` into ``folder``: the ordered run's files (once), its aborts, then
    ``control.json``. The ordered run, or None when the ConfigMap orders none."""
    meta = configmap.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        control = json.loads(annotations[CONTROL_ANNOTATION])
        run = int(control["run"])
    except (KeyError, ValueError, TypeError):
        return None
    code = folder / "runs" / str(run) / "code"
    if not code.is_dir():
        staging = folder / "runs" / str(run) / "code.tmp"
        table = dict(
            line.split("=", 1) for line in annotations.get(PATHS_ANNOTATION, "").splitlines()
        )
        for key, text in (configmap.get("data") or {}).items():
            if key != CONTROL_KEY:
                _file(staging, table.get(key, key), text.encode())
        for key, b64 in (configmap.get("binaryData") or {}).items():
            _file(staging, table.get(key, key), base64.b64decode(b64))
        staging.mkdir(parents=True, exist_ok=True)
        os.replace(staging, code)
    for number, why in (control.get("abort") or {}).items():
        abort = folder / "runs" / str(int(number)) / "abort"
        if not abort.exists():
            _write(abort, str(why).encode())
    order = {
        "run": run,
        "code_dir": str(code),
        "idle_limit_s": control.get("idle_limit_s"),
        "seq": int(control.get("seq") or 0),
    }
    _write(folder / "control.json", json.dumps(order).encode())
    return run


def _file(root: Path, rel: str, data: bytes) -> None:
    if rel.startswith("lib/") or rel.startswith("/") or ".." in Path(rel).parts:
        return  # the runner library is the pod's already; nothing outside the run's folder
    _write(root / rel, data)


def folder_seq(folder: Path) -> tuple[int, int]:
    """(seq, run) of the order in ``folder`` now; (0, 0) for none."""
    try:
        raw = json.loads((folder / "control.json").read_text())
        return int(raw.get("seq") or 0), int(raw.get("run") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0, 0


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """One writer at a time in ``folder`` (the seed and each delivery are processes of
    their own): whoever holds it compares and applies as one step."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def mounted_configmap(mount: Path) -> dict[str, Any] | None:
    """The code ConfigMap as the kubelet mounted it at ``mount`` (files by path, the order
    from :data:`CONTROL_PATH`), in the shape :func:`apply` takes; None without an order.
    The runner library (``lib/``) and the kubelet's own entries (``..data``) are left out."""
    try:
        control = (mount / CONTROL_PATH).read_text()
    except OSError:
        return None
    data: dict[str, str] = {}
    binary: dict[str, str] = {}
    for top, dirs, names in os.walk(mount, followlinks=True):
        rel_top = os.path.relpath(top, mount)
        dirs[:] = [
            d for d in dirs if not d.startswith("..") and not (rel_top == "." and d == "lib")
        ]
        for name in names:
            rel = os.path.normpath(os.path.join(rel_top, name))
            if name.startswith("..") or rel == CONTROL_PATH:
                continue
            raw = Path(top, name).read_bytes()
            try:
                data[rel] = raw.decode("utf-8")
            except UnicodeDecodeError:
                binary[rel] = base64.b64encode(raw).decode()
    meta = {"annotations": {CONTROL_ANNOTATION: control}}
    return {"metadata": meta, "data": data, "binaryData": binary}


def seed(folder: Path, mount: Path) -> int | None:
    """A fresh pod's first order, from its mounted code ConfigMap (nothing when ``folder``
    has an order already: the container restarted, or a delivery came first). The run it
    names, or None."""
    with folder_lock(folder):
        if (folder / "control.json").exists():
            return None
        configmap = mounted_configmap(mount)
        return apply(configmap, folder) if configmap is not None else None
