"""Where the job store is: ``$KTRAIN_HOME`` (default ``~/.ktrain``), read here and nowhere else."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["history_dir", "jobs_dir", "ktrain_home"]


def ktrain_home() -> Path:
    """``$KTRAIN_HOME`` (default ``~/.ktrain``), read afresh on each call (a notebook may set it
    with ``%env`` after the package was imported)."""
    return Path(os.environ.get("KTRAIN_HOME") or Path.home() / ".ktrain")


def jobs_dir(home: Path | None = None) -> Path:
    """The local jobs' folders: ``HOME/jobs`` (default home: :func:`ktrain_home`)."""
    return (home or ktrain_home()) / "jobs"


def history_dir() -> Path:
    """The jobs' histories and records: ``$KTRAIN_HOME/history``."""
    return ktrain_home() / "history"
