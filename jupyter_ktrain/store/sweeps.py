"""A sweep's record in the job store: ``$KTRAIN_HOME/sweeps/NAME.json`` (private, replaced
atomically), written by the process that runs the sweep each time a trial starts or ends and
at most once a second while trials report. What the cell's sweep view, the side panel,
``%ktrain attach SWEEP`` and ``%ktrain compare SWEEP`` read, so they cannot disagree. Its
entries are :mod:`jupyter_ktrain.sweep.record`'s; ``%ktrain delete SWEEP`` removes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .files import make_private_dirs, replace_private, store_error
from .home import ktrain_home
from .versions import versioned

__all__ = ["SWEEP_VERSION", "keep_sweep", "list_sweeps", "read_sweep", "remove_sweep", "sweep_file"]

SWEEP_VERSION = 1


def sweeps_dir() -> Path:
    return ktrain_home() / "sweeps"


def sweep_file(name: str) -> Path:
    return sweeps_dir() / f"{name}.json"


def keep_sweep(record: dict[str, Any]) -> None:
    """Write ``record`` (its ``name`` names the file). Raises the store's one error."""
    path = sweep_file(record["name"])
    try:
        make_private_dirs(path.parent)
        data = json.dumps({**record, "version": SWEEP_VERSION}, sort_keys=True, default=str)
        replace_private(path, data.encode())
    except OSError as exc:
        raise store_error(path, exc) from None


def read_sweep(name: str) -> dict[str, Any] | None:
    """Sweep ``name``'s record; None when there is none. A newer version's is refused with
    the store's one line."""
    path = sweep_file(name)
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return versioned(raw, str(path), "sweep record", SWEEP_VERSION)


def list_sweeps() -> list[dict[str, Any]]:
    """Every readable sweep record, newest first."""
    records = []
    for path in sweeps_dir().glob("*.json") if sweeps_dir().is_dir() else ():
        record = read_sweep(path.stem)
        if record is not None:
            records.append(record)
    return sorted(records, key=lambda r: -float(r.get("started") or 0))


def remove_sweep(name: str) -> bool:
    """Remove sweep ``name``'s record; whether there was one."""
    try:
        sweep_file(name).unlink()
    except FileNotFoundError:
        return False
    return True
