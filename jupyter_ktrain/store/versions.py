"""The one rule every file of the job store is read by.

Each file written carries a ``version`` entry (the newest its writer knows). A reader takes a
file of its own version or an older one (no ``version``: 1, the files from before versions; a
missing entry takes its default), ignores entries it does not know (a newer writer may add
some), and refuses a file of a newer version with one line that says so.
"""

from __future__ import annotations

from typing import Any

from ..errors import BackendError

__all__ = ["StoreVersionError", "versioned"]


class StoreVersionError(BackendError, ValueError):
    """A file of the job store this version cannot read: a newer one's, or not what it should
    hold. Its message is one line, naming the file and what to do."""


def versioned(
    raw: object,
    where: str,
    what: str,
    newest: int,
    error: type[Exception] = StoreVersionError,
) -> dict[str, Any]:
    """``raw`` (a store file's JSON) as a dict whose ``version`` (1 when absent: the files from
    before versions) this jupyter-ktrain reads; else ``error`` with one line saying why and
    what to do."""
    if not isinstance(raw, dict):
        raise error(f"{where} holds no {what} (not a JSON object)")
    version = raw.get("version", 1)
    if not isinstance(version, int) or version > newest:
        raise error(
            f"{where} is version {version!r}, written by a newer jupyter-ktrain than this one "
            f"(reads up to {newest}): use that version for this job, or delete it"
        )
    return raw
