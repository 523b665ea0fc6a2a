"""The GPUs of a job's monitor: each GPU's series (utilisation, memory, power, temperature
against seconds since the job started), the heatmaps from 8 GPUs up, and the alert for a GPU
that stays under ``low_util_pct`` busy for ``low_util_s`` seconds while the job runs.

:class:`GpuWatch` is a part of :class:`~.model.MonitorModel` (its ``gpu`` records)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...jobs import RUNNING
from ..downsample import StreamingDownsampler
from ..glance import GpuGrid, gpu_grids
from .header import Alert, JobHeader

__all__ = ["GPU_FIELDS", "GpuWatch"]

GPU_FIELDS = ("util", "mem_used", "power", "temp")


@dataclass
class _GpuWatch:
    low_since: float | None = None
    last_t: float = 0.0
    last: dict[str, Any] = field(default_factory=dict)


class GpuWatch:
    """The model's GPU series and their alert (module docstring)."""

    header: JobHeader
    plot_points: int
    low_util_pct: float
    low_util_s: float
    gpus: dict[tuple[int, int, str], StreamingDownsampler]
    gpu_last: dict[tuple[int, int], dict[str, Any]]
    _gpu_watch: dict[tuple[int, int], _GpuWatch]
    _alerts: dict[tuple[str, str], Alert]

    def elapsed_x(self, t: float) -> float:
        raise NotImplementedError

    def node_word(self, node: int) -> str:
        raise NotImplementedError

    def gpu_grids(self) -> list[GpuGrid]:
        """The GPUs' heatmaps, one per field, from 8 GPUs up (:mod:`.glance`; none below)."""
        names = {node: self.node_word(node) for node, _ in self.gpu_last}
        return gpu_grids(self.gpu_last, names, self.low_util_pct)

    def _gpu(self, rec: dict[str, Any], now: float, node: int | None) -> None:
        n = rec.get("node", node if node is not None else 0)
        g = rec.get("gpu")
        if not isinstance(n, int) or not isinstance(g, int):
            return
        t = _num(rec.get("t"), now)
        x = self.elapsed_x(t)
        for name in GPU_FIELDS:
            value = rec.get(name)
            if isinstance(value, (int, float)):
                series = self.gpus.get((n, g, name))
                if series is None:
                    series = self.gpus[(n, g, name)] = StreamingDownsampler(self.plot_points)
                series.append(x, float(value))
        self.gpu_last[(n, g)] = rec
        self._watch_util(n, g, rec, t)

    def _watch_util(self, n: int, g: int, rec: dict[str, Any], t: float) -> None:
        util = rec.get("util")
        if not isinstance(util, (int, float)):
            return
        w = self._gpu_watch.setdefault((n, g), _GpuWatch())
        w.last_t, w.last = t, rec
        key = ("gpu-low-util", f"{n}/{g}")
        if util >= self.low_util_pct:
            w.low_since = None
            self._alerts.pop(key, None)
            return
        if w.low_since is None:
            w.low_since = t
        low_for = t - w.low_since
        if self.header.state == RUNNING and low_for >= self.low_util_s and key not in self._alerts:
            self._alerts[key] = Alert(
                "gpu-low-util",
                key[1],
                f"GPU {g} on node {n} has been under {self.low_util_pct:g}% busy for "
                f"{low_for:.0f} s while the job runs (input pipeline or communication bound?)",
                t,
            )


def _num(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) else default
