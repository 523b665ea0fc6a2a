"""A job's last profile in the job store (``%ktrain profile``): beside its record,
``history/BACKEND/NAME/profile.json`` (what the command showed: the table's text, the steps,
each rank's figures) and ``profile/rank{N}.trace.json.gz`` (each rank's Chrome trace, gzipped,
as ``chrome://tracing`` and Perfetto open it). A new profile replaces the last one whole; the
side panel shows the text and serves the traces (:func:`trace_file`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .files import make_private_dirs, replace_private, store_error
from .records import job_dir

__all__ = [
    "PROFILE",
    "TRACES",
    "keep_profile",
    "read_profile",
    "trace_file",
    "trace_name",
    "traces_dir",
]

PROFILE = "profile.json"
TRACES = "profile"  # the folder of the traces


def trace_name(rank: int) -> str:
    return f"rank{rank}.trace.json.gz"


def traces_dir(backend: str, name: str) -> Path:
    """The folder of the job's kept traces."""
    return job_dir(backend, name) / TRACES


def keep_profile(backend: str, name: str, said: dict[str, Any], traces: dict[int, bytes]) -> Path:
    """Keep ``said`` (JSON) and ``traces`` (rank: gzipped Chrome trace) as the job's last
    profile, replacing the one before; the traces' folder. Raises the store's one error."""
    folder = traces_dir(backend, name)
    try:
        make_private_dirs(folder)
        for old in folder.glob("rank*.trace.json.gz"):
            old.unlink(missing_ok=True)
        for rank, data in traces.items():
            replace_private(folder / trace_name(rank), data)
        kept = {**said, "traces": sorted(traces)}
        replace_private(folder.parent / PROFILE, json.dumps(kept, sort_keys=True).encode())
    except OSError as exc:
        raise store_error(folder, exc) from None
    return folder


def read_profile(backend: str, name: str) -> dict[str, Any] | None:
    """What :func:`keep_profile` kept, or None."""
    try:
        data = json.loads((job_dir(backend, name) / PROFILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def trace_file(backend: str, name: str, rank: int) -> Path | None:
    """Rank ``rank``'s kept trace of the job's last profile; None when there is none."""
    path = traces_dir(backend, name) / trace_name(rank)
    return path if path.is_file() else None
