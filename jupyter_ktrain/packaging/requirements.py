"""Which route the job's pinned requirements take into the pod, and the files for it.

Routes (``RequirementsPlan.route``):

- ``"none"``: nothing to install (no requirements, or all are ``provided`` by the base);
- ``"pod-start"``: ``/ktrain/requirements.txt`` is shipped; at pod start
  :mod:`jupyter_ktrain.pod.install` installs the pins the image lacks from the package index
  (needs network);
- ``"wheels"`` (``offline=True``): the wheels are downloaded here (``pip download`` for the
  pod's platform and Python) into ``/ktrain/wheels``; at pod start the missing pins are
  installed from there with ``--no-index`` (no network needed).

Whether the base already has a pin is decided cheaply in two places: ``provided`` names the
user vouches for (a flag; nothing is shipped for them), and at pod start
:mod:`jupyter_ktrain.pod.install` compares each pin with ``importlib.metadata`` and installs
only what is missing or differs, so a base that already carries ``torch==2.5.1`` costs nothing.
We do not pull the base's layers to look: they are gigabytes.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..errors import PackagingError
from .layer import LayerCache

__all__ = ["RequirementsPlan", "normalize_name", "parse_pins", "pip_platforms", "plan_requirements"]

Route = Literal["none", "pod-start", "wheels"]
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([A-Za-z0-9.+!_-]+)\s*$")
_ARCH = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}
_GLIBC = (17, 24, 27, 28, 31, 34)

Runner = Callable[[list[str]], "subprocess.CompletedProcess[bytes]"]


def normalize_name(name: str) -> str:
    """PEP 503 name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pins(lines: Iterable[str]) -> list[tuple[str, str]]:
    """``["numpy==2.1.0", ...]`` -> ``[("numpy", "2.1.0"), ...]``; comments/blank ignored."""
    pins = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        m = _PIN.match(text)
        if not m:
            raise PackagingError(
                f"Requirement {line.strip()!r} is not pinned as NAME==VERSION; the job ships "
                "exact versions so it runs what the notebook ran."
            )
        pins.append((m.group(1), m.group(3)))
    return pins


@dataclass(frozen=True)
class RequirementsPlan:
    """Route + files (relative to the code dir) + which pins travel and which were skipped."""

    route: Route
    files: dict[str, bytes] = field(default_factory=dict)
    requirements: tuple[str, ...] = ()
    provided: tuple[str, ...] = ()

    def describe(self) -> str:
        """One sentence for the notebook."""
        n = len(self.requirements)
        if self.route == "wheels":
            return f"{n} requirement(s) ship as wheels in the image; installed offline at start."
        if self.route == "pod-start":
            return f"{n} requirement(s) are installed from the package index when the pod starts."
        if self.provided:
            return "All requirements are provided by the base image."
        return "No requirements to install."


def pip_platforms(platform: str) -> list[str]:
    """pip ``--platform`` tags for an image platform like ``linux/amd64``."""
    arch = _ARCH.get(platform.split("/")[1] if "/" in platform else platform, "x86_64")
    return [f"manylinux_2_{v}_{arch}" for v in _GLIBC] + [f"manylinux2014_{arch}", f"linux_{arch}"]


def _default_runner(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(argv, capture_output=True, check=False, timeout=1800)


def download_wheels(
    pins: Sequence[str],
    *,
    platform: str,
    python_version: str,
    pip_args: Sequence[str] = (),
    cache: LayerCache | None = None,
    runner: Runner = _default_runner,
) -> dict[str, bytes]:
    """``{"wheels/NAME.whl": bytes}`` for ``pins`` and their dependencies (binary only)."""
    key = hashlib.sha256("\n".join([*pins, platform, python_version, *pip_args]).encode())
    index = (cache.root.parent / "wheels" / key.hexdigest()) if cache else None
    if index is not None and index.is_dir():
        return {f"wheels/{p.name}": p.read_bytes() for p in sorted(index.glob("*.whl"))}
    with tempfile.TemporaryDirectory(prefix="ktrain-wheels-") as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
        argv += ["--only-binary=:all:", "--dest", tmp, "--python-version", python_version]
        argv += [a for p in pip_platforms(platform) for a in ("--platform", p)]
        proc = runner([*argv, *pip_args, *pins])
        if proc.returncode != 0:
            tail = (proc.stderr or b"").decode(errors="replace").strip().splitlines()[-3:]
            raise PackagingError(
                "Could not download wheels for the offline install ("
                + " / ".join(tail)
                + "). Check the pins and the package index, or drop offline mode so the pod "
                "installs them at start."
            )
        wheels = {f"wheels/{p.name}": p.read_bytes() for p in sorted(Path(tmp).glob("*.whl"))}
    if index is not None:
        index.mkdir(parents=True, exist_ok=True)
        for name, data in wheels.items():
            (index / Path(name).name).write_bytes(data)
    return wheels


def plan_requirements(
    lines: Iterable[str],
    *,
    offline: bool = False,
    provided: Iterable[str] = (),
    platform: str = "linux/amd64",
    python_version: str | None = None,
    pip_args: Sequence[str] = (),
    cache: LayerCache | None = None,
    runner: Runner = _default_runner,
) -> RequirementsPlan:
    """Decide the route for pinned ``lines`` (see module docstring) and build its files.

    ``provided``: package names the base image has (user flag); they are not shipped.
    ``python_version``: the pod's Python (``"3.11"``); defaults to this kernel's.
    ``pip_args``: extra ``pip download`` arguments (``--index-url``, ``--find-links``).
    """
    have = {normalize_name(n) for n in provided}
    pins = parse_pins(lines)
    keep = [f"{n}=={v}" for n, v in pins if normalize_name(n) not in have]
    skipped = tuple(f"{n}=={v}" for n, v in pins if normalize_name(n) in have)
    if not keep:
        return RequirementsPlan("none", {}, (), skipped)
    files = {"requirements.txt": ("\n".join(keep) + "\n").encode()}
    if not offline:
        return RequirementsPlan("pod-start", files, tuple(keep), skipped)
    pyver = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    wheels = download_wheels(
        keep,
        platform=platform,
        python_version=pyver,
        pip_args=pip_args,
        cache=cache,
        runner=runner,
    )
    return RequirementsPlan("wheels", {**files, **wheels}, tuple(keep), skipped)
