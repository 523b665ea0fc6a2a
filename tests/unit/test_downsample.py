"""Downsampling keeps the shape and the spikes, bounded in size and cost."""

from __future__ import annotations

import math
import random
import time

import pytest

from jupyter_ktrain.monitor.downsample import StreamingDownsampler, lttb, minmax_lttb


def _noisy(n: int, seed: int = 1) -> tuple[list[float], list[float]]:
    rnd = random.Random(seed)
    xs = [float(i) for i in range(n)]
    ys = [math.exp(-i / (n / 4)) + 0.01 * rnd.random() for i in range(n)]
    return xs, ys


def test_lttb_keeps_ends_and_count() -> None:
    xs, ys = _noisy(10_000)
    ox, _oy = lttb(xs, ys, 500)
    assert len(ox) == 500
    assert (ox[0], ox[-1]) == (0.0, 9999.0)
    assert ox == sorted(ox)
    assert lttb([1.0, 2.0], [3.0, 4.0], 10) == ([1.0, 2.0], [3.0, 4.0])


def test_minmax_lttb_keeps_a_single_spike() -> None:
    xs, ys = _noisy(200_000)
    ys[123_457] = 50.0  # one loss spike in 200k points
    ox, oy = minmax_lttb(xs, ys, 2000)
    assert len(ox) == 2000
    assert max(oy) == 50.0
    assert ox[oy.index(50.0)] == 123_457.0


def test_streaming_is_bounded_and_keeps_spike_first_and_last() -> None:
    ds = StreamingDownsampler(target=500)
    xs, ys = _noisy(300_000)
    ys[77_777] = -9.0
    ds.extend(xs, ys)
    ox, oy = ds.points()
    assert len(ds) == 300_000
    assert len(ox) <= 500
    assert (ox[0], ox[-1]) == (0.0, 299_999.0)
    assert min(oy) == -9.0
    assert ox == sorted(ox)
    assert len(ds._buckets) < 500  # memory stays O(target)


def test_streaming_small_series_is_exact_and_nan_is_a_gap() -> None:
    ds = StreamingDownsampler(target=100)
    for i in range(10):
        ds.append(float(i), float(i * i))
    ds.append(10.0, float("nan"))
    assert ds.points() == ([float(i) for i in range(10)], [float(i * i) for i in range(10)])
    assert len(ds) == 11
    with pytest.raises(ValueError, match="target"):
        StreamingDownsampler(target=2)


def test_streaming_append_is_cheap_and_render_does_not_grow_with_length() -> None:
    ds = StreamingDownsampler(target=2000)
    xs, ys = _noisy(200_000)
    t0 = time.perf_counter()
    ds.extend(xs, ys)
    per_point = (time.perf_counter() - t0) / 200_000
    assert per_point < 20e-6  # ~1 µs measured; generous on a shared machine
    t0 = time.perf_counter()
    ds.points()
    small = time.perf_counter() - t0
    ds.extend(xs, ys)
    ds.extend(xs, ys)
    t0 = time.perf_counter()
    ds.points()
    big = time.perf_counter() - t0
    assert big < max(5 * small, 0.05)
