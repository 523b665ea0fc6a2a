"""The warm cluster jobs this machine started (``$KTRAIN_HOME/warm-kubernetes.json``: each
``NAMESPACE/NAME`` with its shape and when it started), so a new kernel knows them too and a
later cell can say that one of them ended meanwhile. Written by the Kubernetes backend's
submit (:func:`remember`) and its warm part (:func:`forget_ended`); a file that cannot be read
or written is no ledger (nothing is said), never an error."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from .files import make_private_dirs, replace_private
from .home import ktrain_home

__all__ = ["forget_ended", "remember"]


def _warm_file() -> Path:
    return ktrain_home() / "warm-kubernetes.json"


def _remembered() -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        got = json.loads(_warm_file().read_text())
        return got if isinstance(got, dict) else {}
    return {}


def remember(ns: str, name: str, shape: dict[str, Any]) -> None:
    """The warm jobs this machine started (on disk: a new kernel knows them too), so a later
    cell can say that one of them ended meanwhile."""
    known = _remembered()
    known[f"{ns}/{name}"] = {"shape": shape, "started": time.time()}
    with contextlib.suppress(OSError):
        make_private_dirs(_warm_file().parent)
        replace_private(_warm_file(), json.dumps(known).encode())


def forget_ended(ns: str, live: set[str], shape: dict[str, Any]) -> list[str]:
    """The remembered warm jobs of ``ns`` (of this shape) that are gone; forgotten now."""
    known = _remembered()
    gone = [k for k in known if k.startswith(f"{ns}/") and k.split("/", 1)[1] not in live]
    if not gone:
        return []
    said = [k.split("/", 1)[1] for k in gone if known[k].get("shape") == shape]
    for key in gone:
        known.pop(key)
    with contextlib.suppress(OSError):
        replace_private(_warm_file(), json.dumps(known).encode())
    return said
