"""The test cluster's component versions (``versions.env``, which ``build.sh`` reads too)."""

from __future__ import annotations

from pathlib import Path


def versions() -> dict[str, str]:
    out = {}
    for line in (Path(__file__).parent / "versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out[k.strip()] = v.strip()
    return out
