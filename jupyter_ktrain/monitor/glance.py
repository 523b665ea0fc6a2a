"""Big jobs at a glance: what the widget and the side panel show of a job too big for a line
per GPU or a log of every rank. Pure and stdlib only; both views take it from here.

- From :data:`HEATMAP_GPUS` GPUs up (counted from the GPU samples the monitor got),
  :func:`gpu_grids` shapes the latest sample of every GPU into one :class:`GpuGrid` per field
  (utilisation, memory, power): rows are nodes, columns GPU indexes, each cell its value, its
  colour, its words on hover and its mark, the same in every field's grid (``idle``: under
  the idle line of utilisation; ``hot``: too warm, or its memory nearly full). The views
  draw the grid as it is (a table), choosing the field.
- From :data:`RANK_FILTER_RANKS` ranks up, the log views start with rank 0 plus every rank
  that printed a warning or an error (:func:`line_level` classifies a line,
  :func:`start_ranks` picks them); a rank filter reaches every other rank's lines.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "HEATMAP_GPUS",
    "HEAT_FIELDS",
    "HOT_TEMP_C",
    "RANK_FILTER_RANKS",
    "GpuGrid",
    "GpuRow",
    "HeatCell",
    "Level",
    "Mark",
    "gpu_count",
    "gpu_grid",
    "gpu_grids",
    "heat_colour",
    "line_level",
    "start_ranks",
]

HEATMAP_GPUS = 8  # from this many GPUs up, one heatmap instead of a line per GPU
RANK_FILTER_RANKS = 16  # from this many ranks up, the log starts with the ranks that matter
HOT_TEMP_C = 85.0  # a GPU this warm is hot whatever the field shown
HOT_SHARE = 0.95  # a GPU whose memory is this full is hot (the next allocation may fail)
# the fields a heatmap shows, in the selector's order: what each is called, its unit
HEAT_FIELDS: dict[str, tuple[str, str]] = {
    "util": ("utilisation", "%"),
    "mem_used": ("memory used", "MiB"),
    "power": ("power", "W"),
}
IDLE_COLOUR = "#4575b4"  # blue: an idle GPU stands out against the warm scale
MISSING_COLOUR = "#eeeeee"  # no reading of this field
# the warm scale, low to high (light yellow to dark red)
SCALE: tuple[tuple[int, int, int], ...] = ((255, 255, 204), (253, 141, 60), (189, 0, 38))

Mark = Literal["idle", "hot", ""]


@dataclass(frozen=True)
class HeatCell:
    """One GPU in a grid: ``gpu`` its index on the node, ``value`` the field's latest reading
    (None: none), ``label`` the value as the cell shows it, ``colour`` its fill, ``mark``
    ``idle``/``hot``/``""`` and ``title`` every reading in words (the hover)."""

    gpu: int
    value: float | None
    label: str
    colour: str
    mark: Mark
    title: str


@dataclass(frozen=True)
class GpuRow:
    """One node: its number, its name as the views say it (``node 1``, ``pod j-worker-1``)."""

    node: int
    name: str
    cells: tuple[HeatCell, ...]


@dataclass(frozen=True)
class GpuGrid:
    """One field's heatmap: ``field`` (``util``), ``title`` (``GPU utilisation (%)``),
    ``gpus`` the column indexes, ``rows`` a node each, ``top`` the scale's top (the colour of
    a value is its share of it), ``idle``/``hot`` how many cells are marked so."""

    field: str
    title: str
    gpus: tuple[int, ...]
    rows: tuple[GpuRow, ...]
    top: float
    idle: int
    hot: int


def gpu_count(latest: Mapping[tuple[int, int], Mapping[str, Any]]) -> int:
    """How many GPUs the job's samples came from (node, index pairs)."""
    return len(latest)


def heat_colour(share: float) -> str:
    """The warm scale's colour at ``share`` (0 to 1 of the top) as ``#rrggbb``."""
    share = min(1.0, max(0.0, share))
    pos = share * (len(SCALE) - 1)
    k = min(int(pos), len(SCALE) - 2)
    f = pos - k
    a, b = SCALE[k], SCALE[k + 1]
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def _num(rec: Mapping[str, Any], key: str) -> float | None:
    value = rec.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _top(field: str, samples: Collection[Mapping[str, Any]]) -> float:
    """The scale's top: 100 % busy, the largest memory, the most power drawn now."""
    if field == "util":
        return 100.0
    key = "mem_total" if field == "mem_used" else field
    values = [v for r in samples if (v := _num(r, key)) is not None]
    values += [v for r in samples if (v := _num(r, field)) is not None]
    return max(values, default=0.0) or 1.0


def _words(node: str, gpu: int, rec: Mapping[str, Any], mark: Mark) -> str:
    said = []
    for field, (name, unit) in HEAT_FIELDS.items():
        value = _num(rec, field)
        if value is not None:
            total = _num(rec, "mem_total") if field == "mem_used" else None
            of = f" of {total:.0f}" if total else ""
            said.append(f"{name} {value:.0f}{of} {unit}")
    temp = _num(rec, "temp")
    if temp is not None:
        said.append(f"{temp:.0f} °C")
    why = {"idle": " (idle)", "hot": " (hot)", "": ""}[mark]
    return f"{node} GPU {gpu}{why}: " + (", ".join(said) or "no reading")


def _mark(rec: Mapping[str, Any], idle_pct: float) -> Mark:
    """A GPU's mark, the same in every field's grid: ``idle`` under ``idle_pct`` % busy,
    ``hot`` at :data:`HOT_TEMP_C` or with its memory nearly full (:data:`HOT_SHARE`)."""
    util, temp = _num(rec, "util"), _num(rec, "temp")
    if util is not None and util < idle_pct:
        return "idle"
    used, total = _num(rec, "mem_used"), _num(rec, "mem_total")
    if (temp is not None and temp >= HOT_TEMP_C) or (used and total and used >= HOT_SHARE * total):
        return "hot"
    return ""


def gpu_grid(
    latest: Mapping[tuple[int, int], Mapping[str, Any]],
    field: str,
    names: Mapping[int, str] | None = None,
    idle_pct: float = 10.0,
) -> GpuGrid:
    """The heatmap of ``field`` from each GPU's latest sample (``latest[(node, gpu)]``, as
    the monitor keeps them): ``names`` says each node (default ``node N``); a GPU under
    ``idle_pct`` % busy is ``idle``."""
    names = names or {}
    name, unit = HEAT_FIELDS.get(field, (field, ""))
    gpus = tuple(sorted({g for _, g in latest}))
    top = _top(field, latest.values())
    rows: list[GpuRow] = []
    idle = hot = 0
    for node in sorted({n for n, _ in latest}):
        said = names.get(node) or f"node {node}"
        cells = []
        for g in gpus:
            rec = latest.get((node, g))
            if rec is None:
                cells.append(HeatCell(g, None, "", MISSING_COLOUR, "", f"{said} GPU {g}: none"))
                continue
            value = _num(rec, field)
            mark = _mark(rec, idle_pct)
            idle, hot = idle + (mark == "idle"), hot + (mark == "hot")
            colour = (
                MISSING_COLOUR if value is None
                else IDLE_COLOUR if mark == "idle"
                else heat_colour(value / top)
            )  # fmt: skip
            label = "" if value is None else f"{value:.0f}"
            cells.append(HeatCell(g, value, label, colour, mark, _words(said, g, rec, mark)))
        rows.append(GpuRow(node, said, tuple(cells)))
    title = f"GPU {name} ({unit})" if unit else f"GPU {name}"
    return GpuGrid(field, title, gpus, tuple(rows), top, idle, hot)


def gpu_grids(
    latest: Mapping[tuple[int, int], Mapping[str, Any]],
    names: Mapping[int, str] | None = None,
    idle_pct: float = 10.0,
) -> list[GpuGrid]:
    """One grid per field of :data:`HEAT_FIELDS` some sample has, from :data:`HEATMAP_GPUS`
    GPUs up; none below (the views draw a line per GPU then)."""
    if gpu_count(latest) < HEATMAP_GPUS:
        return []
    present = {k for rec in latest.values() for k in rec}
    return [gpu_grid(latest, f, names, idle_pct) for f in HEAT_FIELDS if f in present]


# -- the log's ranks -----------------------------------------------------------------------
Level = Literal["error", "warning"]

_ERROR = re.compile(
    r"Traceback \(most recent call last\)|(Error|Exception)\b|\bERROR\b|\bFATAL\b"
    r"|^[EF]\d{4} |\berror:"
)
_GLOG = re.compile(r"[EFW]\d{4} ")
_WORDS = ("error", "exception", "traceback", "fatal", "warn")
_WARNING = re.compile(r"Warning\b|\bWARN\b|^W\d{4} ", re.IGNORECASE)


def line_level(text: str) -> Level | None:
    """``error`` for a line that says an error (a traceback, ``ValueError: ...``, a log's
    ``ERROR``, glog's ``E0101 ...``), ``warning`` for a warning (``UserWarning: ...``,
    ``WARNING``, ``NCCL WARN``, glog's ``W0101 ...``), else None."""
    low = text.lower()  # most lines say neither: a cheap look first
    if not (_GLOG.match(text) or any(word in low for word in _WORDS)):
        return None
    if _ERROR.search(text):
        return "error"
    if _WARNING.search(text):
        return "warning"
    return None


def start_ranks(ranks: Collection[int], flagged: Collection[int]) -> tuple[int, ...] | None:
    """The ranks a log view starts with: from :data:`RANK_FILTER_RANKS` ranks up, rank 0 plus
    every ``flagged`` rank (one that printed a warning or an error); None below (every
    rank)."""
    if len(ranks) < RANK_FILTER_RANKS:
        return None
    return tuple(sorted({0, *(r for r in flagged if r in ranks)}))
