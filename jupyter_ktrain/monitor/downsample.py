"""Downsampling for live plots: MinMax preselection followed by LTTB.

A day-long run reports millions of points; a plot needs about 2,000 per trace. Two tools:

- :func:`minmax_lttb` — one-shot, for a whole series held in memory: keep the min and max
  of ``ratio * n_out / 2`` equal-count buckets (spikes survive), then Largest-Triangle-Three-
  Buckets down to ``n_out`` (shape survives). O(n); uses numpy for the MinMax pass when it is
  installed, pure Python otherwise.
- :class:`StreamingDownsampler` — incremental: O(1) amortised per appended point and memory
  bounded by ``target`` points however long the run. It keeps min and max per equal-count
  bucket; when the bucket count reaches ``target / 2`` neighbouring buckets are merged
  (bucket width doubles), so between ``target / 2`` and ``target`` points are drawn (the
  M4/MinMax idea: every spike survives). :meth:`StreamingDownsampler.points` asked for fewer
  points than that reduces them with LTTB; first and last raw points are always included.

Pure; no I/O.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["StreamingDownsampler", "lttb", "minmax_lttb"]

Points = tuple[list[float], list[float]]


def lttb(xs: Sequence[float], ys: Sequence[float], n_out: int) -> Points:
    """Largest-Triangle-Three-Buckets: ``n_out`` points of ``(xs, ys)``, ends included."""
    n = len(xs)
    if n <= n_out:
        return [float(x) for x in xs], [float(y) for y in ys]
    if n_out < 3:
        raise ValueError("lttb needs n_out >= 3")
    out_x = [float(xs[0])]
    out_y = [float(ys[0])]
    every = (n - 2) / (n_out - 2)
    a = 0
    for i in range(n_out - 2):
        start = int(i * every) + 1
        end = int((i + 1) * every) + 1
        nxt_end = min(int((i + 2) * every) + 1, n)
        if nxt_end <= end:  # last bucket: the next "bucket" is the final point
            avg_x, avg_y = float(xs[n - 1]), float(ys[n - 1])
        else:
            cnt = nxt_end - end
            avg_x = math.fsum(xs[end:nxt_end]) / cnt
            avg_y = math.fsum(ys[end:nxt_end]) / cnt
        ax, ay = float(xs[a]), float(ys[a])
        best, best_area = start, -1.0
        for j in range(start, end):
            area = abs((ax - avg_x) * (ys[j] - ay) - (ax - xs[j]) * (avg_y - ay))
            if area > best_area:
                best, best_area = j, area
        out_x.append(float(xs[best]))
        out_y.append(float(ys[best]))
        a = best
    out_x.append(float(xs[n - 1]))
    out_y.append(float(ys[n - 1]))
    return out_x, out_y


def _numpy() -> Any:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy is optional
        return None
    return numpy


def _minmax_indices(ys: Sequence[float], n_buckets: int) -> list[int]:
    """Indices of min and max per equal-count bucket, in order, first and last included."""
    n = len(ys)
    np = _numpy()
    idx: list[int] = [0]
    if np is not None:
        arr = np.asarray(ys, dtype=float)
        bounds = np.linspace(1, n - 1, n_buckets + 1).astype(int)
        for lo, hi in itertools.pairwise(bounds):
            if hi <= lo:
                continue
            seg = arr[lo:hi]
            i_min, i_max = int(seg.argmin()) + lo, int(seg.argmax()) + lo
            idx.extend(sorted({i_min, i_max}))
    else:
        step = (n - 2) / n_buckets
        for b in range(n_buckets):
            lo, hi = int(b * step) + 1, int((b + 1) * step) + 1
            if hi <= lo:
                continue
            seg = range(lo, hi)
            i_min = min(seg, key=ys.__getitem__)
            i_max = max(seg, key=ys.__getitem__)
            idx.extend(sorted({i_min, i_max}))
    idx.append(n - 1)
    return idx


def minmax_lttb(xs: Sequence[float], ys: Sequence[float], n_out: int, ratio: int = 4) -> Points:
    """Downsample a whole series to at most ``n_out`` points (MinMaxLTTB)."""
    n = len(xs)
    if n <= n_out:
        return [float(x) for x in xs], [float(y) for y in ys]
    n_buckets = max(1, (n_out * ratio) // 2)
    if n_buckets * 2 >= n:
        return lttb(xs, ys, n_out)
    idx = _minmax_indices(ys, n_buckets)
    return lttb([xs[i] for i in idx], [ys[i] for i in idx], n_out)


class StreamingDownsampler:
    """Append points as they arrive; ask for at most ``target`` points to draw at any time.

    Buckets hold ``width`` consecutive points each (by arrival, so x need not be monotonic).
    Each bucket keeps ``(x, y)`` of its min and of its max in arrival order. NaN values are
    counted but not drawn.
    """

    __slots__ = (
        "_buckets",
        "_cur",
        "_fill",
        "_first_i",
        "_max_buckets",
        "count",
        "first",
        "last",
        "revision",
        "target",
        "width",
    )

    def __init__(self, target: int = 2000) -> None:
        if target < 4:
            raise ValueError("target must be at least 4 points")
        self.target = target
        self.revision = 0  # grows on every change: a view redraws when it differs
        self._reset()

    def _reset(self) -> None:
        self._max_buckets = (self.target - 2) // 2
        self.width = 1
        self.count = 0
        self.first: tuple[float, float] | None = None
        self._first_i = 0
        self.last: tuple[float, float] | None = None
        # closed buckets: [min_i, min_x, min_y, max_i, max_x, max_y]
        self._buckets: list[list[Any]] = []
        self._cur: list[Any] | None = None
        self._fill = 0

    def __len__(self) -> int:
        return self.count

    def append(self, x: float, y: float) -> None:
        if y != y:  # NaN: a gap, nothing to keep
            self.count += 1
            return
        i = self.count
        self.count += 1
        self.revision += 1
        if self.first is None:
            self.first = (x, y)
            self._first_i = i
        self.last = (x, y)
        cur = self._cur
        if cur is None:
            self._cur = [i, x, y, i, x, y]
            self._fill = 1
        else:
            if y < cur[2]:
                cur[0], cur[1], cur[2] = i, x, y
            if y > cur[5]:
                cur[3], cur[4], cur[5] = i, x, y
            self._fill += 1
        if self._fill >= self.width:
            self._buckets.append(self._cur)  # type: ignore[arg-type]
            self._cur = None
            self._fill = 0
            if len(self._buckets) >= self._max_buckets:
                self._halve()

    def truncate(self, x: float) -> None:
        """Drop the points at ``x`` and after it: what a job restarted from a checkpoint at an
        earlier step reports again replaces what it reported the first time. The points kept
        are those drawn (a long series is downsampled already); ``count`` becomes theirs."""
        xs, ys = self._candidates()
        self._rebuild((a, b) for a, b in zip(xs, ys, strict=True) if a < x)

    def place(self, x: float, y: float) -> None:
        """A point that comes after later ones (another process's earlier step): put among
        the others in ``x`` order, replacing one already at ``x``."""
        xs, ys = self._candidates()
        kept = [(a, b) for a, b in zip(xs, ys, strict=True) if a != x]
        self._rebuild(sorted([*kept, (x, y)], key=lambda p: p[0]))

    def _rebuild(self, points: Iterable[tuple[float, float]]) -> None:
        """The series anew from ``points`` (in ``x`` order), as a changed one (``revision``)."""
        revision = self.revision
        self._reset()
        for a, b in points:
            self.append(a, b)
        self.revision = revision + 1

    def extend(self, xs: Sequence[float], ys: Sequence[float]) -> None:
        for x, y in zip(xs, ys, strict=True):
            self.append(x, y)

    def _halve(self) -> None:
        merged: list[list[Any]] = []
        b = self._buckets
        for k in range(0, len(b) - 1, 2):
            p, q = b[k], b[k + 1]
            lo = p if p[2] <= q[2] else q
            hi = p if p[5] >= q[5] else q
            merged.append([lo[0], lo[1], lo[2], hi[3], hi[4], hi[5]])
        if len(b) % 2:
            merged.append(b[-1])
        self._buckets = merged
        self.width *= 2

    def _candidates(self) -> Points:
        if self.first is None:
            return [], []
        xs: list[float] = [self.first[0]]
        ys: list[float] = [self.first[1]]
        last_i = self._first_i
        buckets = self._buckets if self._cur is None else [*self._buckets, self._cur]
        for b in buckets:
            lo_i, hi_i = b[0], b[3]
            if lo_i == hi_i:
                if lo_i != last_i:
                    xs.append(b[1])
                    ys.append(b[2])
            elif lo_i < hi_i:
                if lo_i != last_i:
                    xs.append(b[1])
                    ys.append(b[2])
                xs.append(b[4])
                ys.append(b[5])
            else:
                if hi_i != last_i:
                    xs.append(b[4])
                    ys.append(b[5])
                xs.append(b[1])
                ys.append(b[2])
            last_i = max(lo_i, hi_i)
        if self.last is not None and (not xs or (xs[-1], ys[-1]) != self.last):
            xs.append(self.last[0])
            ys.append(self.last[1])
        return xs, ys

    def points(self, n_out: int | None = None) -> Points:
        """At most ``n_out`` (default ``target``) points, first and last raw points included."""
        n_out = self.target if n_out is None else max(3, n_out)
        xs, ys = self._candidates()
        if len(xs) <= n_out:
            return xs, ys
        return lttb(xs, ys, n_out)
