"""The monitor's view-model: what every view shows of a job, decided once.

Three views render a :class:`~jupyter_ktrain.monitor.model.MonitorModel`: the cell widget
(:mod:`jupyter_ktrain.widgets.monitor`, SVG charts), the text view (:mod:`.text`) and the side
panel (:mod:`jupyter_ktrain.server.core` -> JSON -> ``labextension/src``). They all take from
here, so they cannot drift:

- job states' colours (the states themselves: :mod:`jupyter_ktrain.jobs`);
- the palette: one colour per rank (:func:`rank_colour`), the same in every panel and log label;
- plot panels (:func:`plot_panels`): a typed :class:`PanelKey` per panel (a reported metric or
  a GPU field), its title and axis titles, and one :class:`TraceView` per rank or GPU with its
  label and colour;
- summary values (:func:`summary_values`): a metric reported once (Trainer's ``train_runtime``,
  ``total_flos``... at the end of a run) is one number, shown as a value, not as a chart of one
  point. It becomes a chart when a second point comes.

To add a plot: a record field becomes a metric panel by itself; a new GPU field goes in
:data:`GPU_TITLES` (and the agent's sampler). The palette and the payload types reach
TypeScript through ``scripts/gen_ts.py`` (``labextension/src/palette.ts``, ``payloads.ts``).
Pure and stdlib only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..jobs import CANCELLED, DELETED, FAILED, JOB_STATES, RUNNING, SUCCEEDED, JobState
from .glance import HEATMAP_GPUS, gpu_count

if TYPE_CHECKING:
    from .downsample import StreamingDownsampler
    from .model import Marker, MonitorModel

__all__ = [
    "GPU_TITLES",
    "NOTICES",
    "NO_RANK_COLOUR",
    "OTHER_STATE_COLOUR",
    "PALETTE",
    "STATE_COLOURS",
    "BandLine",
    "PanelKey",
    "PanelView",
    "SummaryValue",
    "TraceView",
    "Who",
    "fmt_value",
    "job_state",
    "plot_panels",
    "rank_band",
    "rank_colour",
    "series_colour",
    "state_colour",
    "summary_values",
    "trace_label",
]


def job_state(word: str) -> JobState:
    """``word`` as a :data:`JobState`; ValueError naming the states for any other word (every
    backend reports one of :data:`JOB_STATES`, so another is a bug, not a state to show)."""
    for state in JOB_STATES:
        if word == state:
            return state
    raise ValueError(f"unknown job state {word!r}: a job is one of {', '.join(JOB_STATES)}")


# -- colours -------------------------------------------------------------------------------
PALETTE: tuple[str, ...] = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
    "#7f7f7f",
)
NO_RANK_COLOUR = "#888888"  # lines of no rank: the agent, torchrun
STATE_COLOURS: dict[str, str] = {
    RUNNING: "#2ca02c",
    SUCCEEDED: "#1f77b4",
    FAILED: "#d62728",
    CANCELLED: "#7f7f7f",
    DELETED: "#7f7f7f",
}
OTHER_STATE_COLOUR = "#ff7f0e"  # Pending, and anything a backend may add


def state_colour(state: str) -> str:
    return STATE_COLOURS.get(state, OTHER_STATE_COLOUR)


def rank_colour(rank: int | None) -> str:
    """Rank ``rank``'s colour: its log label and its traces in every panel."""
    return NO_RANK_COLOUR if rank is None else PALETTE[rank % len(PALETTE)]


# A trace's owner: a rank (metric panels) or (node, GPU index) (GPU panels).
Who = int | tuple[int, int]


def series_colour(who: Who) -> str:
    """A rank's colour (the same as its log label's); a GPU's by its index on the node."""
    return rank_colour(who if isinstance(who, int) else who[1])


def trace_label(who: Who) -> str:
    """``rank 3``, ``node 1 GPU 0``."""
    return f"rank {who}" if isinstance(who, int) else f"node {who[0]} GPU {who[1]}"


# -- alerts --------------------------------------------------------------------------------
# alert codes that say what happened (a resume from a checkpoint, a queue's eviction and
# requeue), not that something is wrong with the job
NOTICES: frozenset[str] = frozenset({"resume", "admitted", "evicted", "link"})


# -- plot panels ---------------------------------------------------------------------------
GPU_TITLES: dict[str, str] = {
    "util": "GPU utilisation (%)",
    "mem_used": "GPU memory used (MiB)",
    "power": "GPU power (W)",
    "temp": "GPU temperature (°C)",
}
PanelKind = Literal["metric", "gpu"]


@dataclass(frozen=True, order=True)
class PanelKey:
    """One plot panel: a reported metric (``metric``, ``loss``) or a GPU field (``gpu``,
    ``util``). ``id`` is its name on the wire and in the widget (``metric:loss``)."""

    kind: PanelKind
    field: str

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.field}"

    @property
    def name(self) -> str:
        """What a user calls it: ``loss``, ``gpu util``."""
        return self.field if self.kind == "metric" else f"gpu {self.field}"

    @property
    def title(self) -> str:
        """The panel's title and y axis title."""
        return self.field if self.kind == "metric" else GPU_TITLES.get(self.field, self.field)

    @property
    def x_title(self) -> str:
        return "step" if self.kind == "metric" else "seconds"

    @classmethod
    def parse(cls, text: str) -> PanelKey:
        """Inverse of :attr:`id`; also the views' shorthand ``loss`` and ``gpu:util``."""
        kind, sep, field = text.partition(":")
        if sep and kind in ("metric", "gpu"):
            return cls("metric" if kind == "metric" else "gpu", field)
        return cls("metric", text)


@dataclass(frozen=True)
class TraceView:
    who: Who
    series: StreamingDownsampler

    @property
    def label(self) -> str:
        return trace_label(self.who)

    @property
    def colour(self) -> str:
        return series_colour(self.who)


@dataclass(frozen=True)
class PanelView:
    """``markers``: the restarts of the job (a metric panel's, x = step): a line each."""

    key: PanelKey
    traces: tuple[TraceView, ...]
    markers: tuple[Marker, ...] = ()


@dataclass(frozen=True)
class SummaryValue:
    """A metric reported once so far: ``name`` = ``value`` (rank ``rank``'s, at ``x``)."""

    name: str
    value: float
    rank: int
    x: float


def _metric_groups(model: MonitorModel) -> dict[str, list[tuple[int, StreamingDownsampler]]]:
    groups: dict[str, list[tuple[int, StreamingDownsampler]]] = {}
    for (rank, name), series in sorted(model.metrics.items()):
        groups.setdefault(name, []).append((rank, series))
    return groups


def _charted(series: list[tuple[int, StreamingDownsampler]]) -> bool:
    """A metric is a chart once some rank reported it twice; before, it is a value."""
    return any(s.count > 1 for _, s in series)


def plot_panels(
    model: MonitorModel, ranks: set[int] | None = None, gpu_lines: bool | None = None
) -> list[PanelView]:
    """Every panel in display order: metrics by name (a trace per rank, only ``ranks`` when
    given), then GPU fields (a trace per node/GPU) while the job has fewer GPUs than
    :data:`~.glance.HEATMAP_GPUS` (from there on the views show the heatmaps of
    :mod:`.glance`; ``gpu_lines`` True or False decides instead). A metric with one point is
    no panel (see :func:`summary_values`)."""
    panels: list[PanelView] = []
    for name, series in _metric_groups(model).items():
        if not _charted(series):
            continue
        traces = tuple(TraceView(r, s) for r, s in series if ranks is None or r in ranks)
        if traces:
            panels.append(PanelView(PanelKey("metric", name), traces, tuple(model.markers)))
    if gpu_lines is None:
        gpu_lines = gpu_count(model.gpu_last) < HEATMAP_GPUS
    fields: dict[str, list[TraceView]] = {}
    for (node, gpu, field), s in sorted(model.gpus.items()) if gpu_lines else ():
        fields.setdefault(field, []).append(TraceView((node, gpu), s))
    for field, gpu_traces in sorted(fields.items()):
        panels.append(PanelView(PanelKey("gpu", field), tuple(gpu_traces)))
    return panels


@dataclass(frozen=True)
class BandLine:
    """One edge or the middle of a band over many ranks' traces: ``min of 512 ranks``."""

    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]


def rank_band(traces: Sequence[TraceView], points: int) -> list[BandLine]:
    """min, median and max over ``traces`` at each x (binned to ``points`` x's when the
    ranks' downsampled points fall apart): a big job's metric in three lines."""
    by_x: dict[float, list[float]] = {}
    for t in traces:
        xs, ys = t.series.points(points)
        for x, y in zip(xs, ys, strict=True):
            by_x.setdefault(x, []).append(y)
    keys = sorted(by_x)
    if len(keys) > points:  # one bin per drawn point
        lo, width = keys[0], (keys[-1] - keys[0]) / points or 1.0
        bins: dict[int, tuple[list[float], list[float]]] = {}
        for x in keys:
            bxs, bys = bins.setdefault(min(points - 1, int((x - lo) / width)), ([], []))
            bxs.append(x)
            bys += by_x[x]
        by_x = {sum(bxs) / len(bxs): bys for bxs, bys in bins.values()}
        keys = sorted(by_x)
    edges: dict[str, list[float]] = {"min": [], "median": [], "max": []}
    for x in keys:
        ys = sorted(by_x[x])
        edges["min"].append(ys[0])
        edges["median"].append(ys[len(ys) // 2])
        edges["max"].append(ys[-1])
    n = len(traces)
    return [BandLine(f"{name} of {n} ranks", tuple(keys), tuple(ys)) for name, ys in edges.items()]


def summary_values(model: MonitorModel) -> list[SummaryValue]:
    """Metrics reported once so far (by any rank), as values: the lowest rank's."""
    out: list[SummaryValue] = []
    for name, series in _metric_groups(model).items():
        if _charted(series):
            continue
        rank, s = series[0]
        xs, ys = s.points()
        if ys:
            out.append(SummaryValue(name, ys[-1], rank, xs[-1]))
    return out


def fmt_value(value: float) -> str:
    """A metric value for reading: ``0.5213``, ``1.23e+15``, ``42``."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"
