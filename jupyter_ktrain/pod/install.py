"""Pod-side requirement install: ``python -m jupyter_ktrain.pod.install [CODE_DIR]``.

Runs in the job's container before torchrun (standard library only: the image may have
nothing else). Reads ``CODE_DIR/requirements.txt`` (pins ``NAME==VERSION``), skips every pin the
image already satisfies (``importlib.metadata``; silently), and installs the rest with a quiet
pip: from ``CODE_DIR/wheels`` with ``--no-index`` when that directory exists (offline
route), else from
the package index. Exit status is pip's (0 when nothing was needed). Messages go out as
``[agent]: `` lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from .launch import CODE_DIR
from .protocol import format_agent_line

__all__ = ["ensure_requirements", "install_command", "install_lock", "main", "missing_pins"]


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()


def _installed(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def missing_pins(lines: Sequence[str], have: Callable[[str], str] = _installed) -> list[str]:
    """The pins among ``lines`` that the running Python lacks or has at another version
    (``have(name)``: the installed version, ``""`` when absent)."""
    out = []
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        name, _, version = text.partition("==")
        name = re.sub(r"\[.*\]", "", name).strip()
        installed = have(name)
        # a local version label (torch 2.13.0+cu130) satisfies the pin 2.13.0, as for pip
        if installed.split("+")[0] != version.strip().split("+")[0]:
            out.append(text)
    return out


def install_command(code_dir: str, pins: Sequence[str], python: str = sys.executable) -> list[str]:
    """pip argv installing ``pins``; offline (``--no-index``) when ``code_dir/wheels`` exists."""
    argv = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    argv.append("--no-cache-dir")
    wheels = Path(code_dir) / "wheels"
    if wheels.is_dir():
        argv += ["--no-index", "--find-links", str(wheels)]
    if not os.access(sysconfig.get_paths()["purelib"], os.W_OK):
        argv.append("--user")
    return [*argv, *pins]


def ensure_requirements(
    code_dir: str = CODE_DIR,
    *,
    python: str = sys.executable,
    run: Callable[[list[str]], int] = subprocess.call,
) -> int:
    """Install what ``code_dir/requirements.txt`` pins and the image lacks; pip's exit code."""
    req = Path(code_dir) / "requirements.txt"
    if not req.is_file():
        return 0
    pins = missing_pins(req.read_text().splitlines())
    if not pins:
        return 0  # the image has everything: nothing to say
    offline = (Path(code_dir) / "wheels").is_dir()
    route = "shipped wheels (offline)" if offline else "the package index"
    code = run(install_command(code_dir, pins, python))
    if code != 0:
        _say(f"pip failed with exit code {code} installing {' '.join(pins)} from {route}")
        return code
    _say(f"installed {len(pins)} requirement(s) from {route}: {' '.join(pins)}")
    return code


@contextlib.contextmanager
def install_lock() -> Iterator[None]:
    """One requirements install at a time on this host (the ranks of an MPI worker pod, the
    local backend's nodes, a warm node's runs): the first installs, the others then find
    nothing missing."""
    path = os.path.join(tempfile.gettempdir(), f"ktrain-install-{os.getuid()}.lock")
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return ensure_requirements(args[0] if args else CODE_DIR)


if __name__ == "__main__":
    sys.exit(main())
