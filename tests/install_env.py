"""jupyter-ktrain as users get it, for the install tests: a clean copy of the repository (what a
clone holds, and this checkout's uncommitted work), the wheel and the sdist built from it the
standard way (``python -m build``: the sdist, then the wheel from the sdist, each in an isolated
build environment), and fresh virtual environments that install them.

Two installers make those environments, each used as users use it: ``uv pip install`` (uv's
pip interface: the same wheel installation rules and the same isolated builds of an sdist, in
seconds instead of a minute and a half on two busy cores) for the full installs, and pip itself
for the bare install of the package and a kernel, which is what ``pip install jupyter-ktrain``
gives a user. The build front end installs its isolated build environments with uv too.

Nothing of the checkout's ``.venv`` reaches such an environment: its processes get a ``PATH``
with the environment's own ``bin`` first, no ``PYTHONPATH``, no user site-packages and Jupyter
folders of their own. One thing is provided rather than installed: torch (the pinned CUDA build,
about 5 GB with its libraries), as a Kubeflow notebook image or a laptop already has it. The
environment reads it through a ``.pth`` line from a folder of links to the installed
distributions of torch and its requirements (nothing else of the checkout's environment), so no
test copies 5 GB; without that line the environment has no torch, as a plain install has none.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import uv
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent  # the checkout's environment, kept out of the installs


def clean_copy(dest: Path) -> Path:
    """The repository's files as a clone has them, plus uncommitted and untracked work, but
    nothing git ignores (no ``node_modules``, no built side panel, no ``.venv``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.is_file():  # deleted in the work tree, not yet in the index
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)
    return dest


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``cmd`` with its output (both streams) kept in ``log`` and returned."""
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    log.write_text(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}")
    return done


@dataclass(frozen=True)
class Dists:
    wheel: Path
    sdist: Path


def build_dists(src: Path, out: Path, log: Path) -> Dists:
    """``python -m build`` of the clean copy ``src`` into ``out``: an sdist, then a wheel
    built from that sdist (each in a fresh isolated build environment, as pip and build make
    for a user). Fails with the build's output."""
    done = run([sys.executable, "-m", "build", "--installer", "uv", "--outdir", str(out),
                str(src)], log, env=_build_env())  # fmt: skip
    assert done.returncode == 0, f"python -m build failed:\n{done.stdout[-6000:]}{done.stderr}"
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dists(wheel, sdist)


def _build_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = _path_without_venv()
    return env


def _path_without_venv() -> str:
    return os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN
    )


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def sdist_names(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as t:
        return t.getnames()


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment at ``path`` and what its processes run with."""

    path: Path
    env: dict[str, str]

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)


def make_venv(path: Path, requirements: list[str], log: Path, *, torch: bool, home: Path,
              installer: str = "uv") -> Venv:  # fmt: skip
    """A new venv at ``path`` with ``REQUIREMENTS`` installed by ``installer`` (``uv``: ``uv pip
    install``; ``pip``: the venv's own pip; each with its cache as a user's), torch provided
    (see the module docstring) when ``torch``, jobs stored in ``home``."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    env = _venv_env(path, home)
    python = str(path / "bin" / "python")
    install = (
        [_uv(), "pip", "install", "--quiet", "--python", python]
        if installer == "uv"
        else [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    )
    done = run([*install, *requirements], log, env=env)
    assert done.returncode == 0, f"{installer} install failed:\n{done.stdout[-4000:]}{done.stderr}"
    venv = Venv(path, env)
    if torch:
        provide_torch(venv)
    return venv


def _uv() -> str:
    """The uv of the checkout's environment (a test requirement), run by its path: the venvs'
    ``PATH`` leaves that environment out."""
    return str(uv.find_uv_bin())


def provide_torch(venv: Venv) -> None:
    """torch in ``venv`` as its image would have it (see the module docstring)."""
    ask = "import site; print(site.getsitepackages()[0])"
    site = Path(
        subprocess.run([venv.python, "-c", ask], capture_output=True, text=True, check=True,
                       env=venv.env).stdout.strip()
    )  # fmt: skip
    links = venv.path.parent / f"{venv.path.name}-torch"
    _link_distributions(links, _closure("torch"))
    (site / "zz_provided_torch.pth").write_text(f"{links}\n")


def _venv_env(path: Path, home: Path) -> dict[str, str]:
    """The environment of a user's shell in the venv: its ``bin`` first on ``PATH``, and
    nothing that would let the checkout's environment in."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "KTRAIN", "PIP_TARGET"))
    }
    jupyter = path.parent / f"{path.name}-jupyter"
    return {
        **keep,
        "PATH": os.pathsep.join([str(path / "bin"), _path_without_venv()]),
        "VIRTUAL_ENV": str(path),
        "PYTHONNOUSERSITE": "1",
        "JUPYTER_CONFIG_DIR": str(jupyter / "config"),
        "JUPYTER_DATA_DIR": str(jupyter / "data"),
        "JUPYTER_RUNTIME_DIR": str(jupyter / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(jupyter / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(jupyter / "workspaces"),
        "KTRAIN_HOME": str(home),
    }


def _closure(name: str) -> list[md.Distribution]:
    """Distribution ``name`` as installed here, with every requirement it needs on this
    platform, recursively (extras not asked for left out)."""
    seen: dict[str, md.Distribution] = {}
    todo = [name]
    while todo:
        key = todo.pop().lower().replace("_", "-")
        if key in seen:
            continue
        dist = md.distribution(key)
        seen[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _link_distributions(folder: Path, dists: list[md.Distribution]) -> None:
    """``folder`` with a link to each top-level entry (package, module, ``.dist-info``) the
    distributions ``dists`` installed, so an import path of that folder sees them alone."""
    folder.mkdir(parents=True, exist_ok=True)
    for dist in dists:
        base = Path(str(dist.locate_file("")))
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops:
            target, link = base / top, folder / top
            if target.exists() and not link.exists() and top != "__pycache__":
                link.symlink_to(target)
