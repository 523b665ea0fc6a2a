"""RDMA network profiles as data: ``--rdma infiniband|roce|tcp|FILE``.

Built-in profiles live in ``rdma_profiles.yaml`` next to this module. A platform team
overrides or extends them with a YAML file of the same shape, named by the
``KTRAIN_RDMA_PROFILES`` environment variable or passed as ``profiles_file``; a user can point
``--rdma`` at a file holding one profile. Reading files is the only I/O here.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError
from .parts import Rdma

__all__ = ["PROFILES_ENV", "builtin_profiles", "load_profiles", "resolve_profile"]

PROFILES_ENV = "KTRAIN_RDMA_PROFILES"
_BUILTIN = Path(__file__).with_name("rdma_profiles.yaml")


def _read_yaml(path: Path, what: str) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SpecError(f"{what} {path} cannot be read ({exc.strerror}); check the path.") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{what} {path} is not valid YAML: {exc}.") from None


@lru_cache(maxsize=1)
def builtin_profiles() -> dict[str, Rdma]:
    data = yaml.safe_load(_BUILTIN.read_text())
    return {name: Rdma.from_dict(body, name=name) for name, body in data.items()}


def load_profiles(profiles_file: str | os.PathLike[str] | None = None) -> dict[str, Rdma]:
    """Built-in profiles, overridden by ``profiles_file`` or ``$KTRAIN_RDMA_PROFILES``."""
    profiles = dict(builtin_profiles())
    override = profiles_file or os.environ.get(PROFILES_ENV)
    if override:
        data = _read_yaml(Path(override), f"RDMA profiles file (${PROFILES_ENV})")
        if not isinstance(data, dict):
            raise SpecError(
                f"RDMA profiles file {override} must map profile names to profiles "
                f"(e.g. 'infiniband: {{env: {{NCCL_IB_HCA: mlx5_0}}}}')."
            )
        for name, body in data.items():
            profiles[str(name)] = Rdma.from_dict(body or {}, name=str(name))
    return profiles


def resolve_profile(value: str, *, profiles_file: str | os.PathLike[str] | None = None) -> Rdma:
    """``--rdma VALUE``: a profile name, or a YAML file holding one profile."""
    profiles = load_profiles(profiles_file)
    if value in profiles:
        return profiles[value]
    path = Path(value)
    if path.suffix in (".yaml", ".yml", ".json") or path.exists():
        data = _read_yaml(path, "--rdma profile file")
        if not isinstance(data, dict):
            raise SpecError(f"--rdma {value}: the file must hold one profile mapping.")
        return Rdma.from_dict(data, name=str(data.get("name", path.stem)))
    raise SpecError(
        f"--rdma {value!r} is neither a profile ({', '.join(sorted(profiles))}) nor a profile "
        f"file: use one of those names or a YAML file path."
    )
