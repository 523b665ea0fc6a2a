"""``ktrain.report(step=..., total=..., loss=...)``: training metrics and progress for the monitor.

Inside a job's rank process (any kind: :func:`jupyter_ktrain.pod.ranks.global_rank` finds its
rank) each call writes one structured record line to ``sys.stdout``::

    @@ktrain {"type":"metric","rank":0,"t":1763700000.123,"step":10,"loss":0.52}

The in-rank runtime prefixes every stdout line with ``[rank{N}]: ``; the monitor separates
these records from what the user prints. Outside a job (in the notebook kernel) ``report`` is
a no-op. ``total`` (the step count the job will reach) makes the record a progress update too:
the monitor shows percent done and time left from it (:mod:`jupyter_ktrain.pod.progress`);
a call with only ``step`` and ``total`` updates progress without plotting anything.

Contract: a call costs a few microseconds, is safe from any thread (one record is one
``write``), and never raises into training: a value that is not a finite number, a reserved
name or a bad step is dropped with one warning on stderr per name.

When the node's agent serves Prometheus metrics it sets ``KTRAIN_METRICS_UDP`` (``HOST:PORT``
on 127.0.0.1); each record then also goes there as one non-blocking datagram.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .protocol import RECORD_MARK, RESERVED_KEYS, Checkpoint, Metric, Resume, format_record
from .ranks import global_rank

__all__ = ["add_listener", "emit", "report"]

_lock = threading.Lock()
_warned: set[str] = set()
_rank_cache: tuple[int, int | None] | None = None  # (pid, rank) so a fork reads it anew
_sink_cache: tuple[int, tuple[socket.socket, tuple[str, int]] | None] | None = None
METRICS_UDP_ENV = "KTRAIN_METRICS_UDP"


_listeners: list[Callable[[dict[str, Any]], None]] = []


def add_listener(listener: Callable[[dict[str, Any]], None]) -> None:
    """Also hand every record this process reports to ``listener`` (after it is written).

    For in-job consumers (the Trainer status endpoint); a listener must return quickly and
    its exceptions are swallowed like any other reporting failure."""
    _listeners.append(listener)


def _rank() -> int | None:
    global _rank_cache
    pid = os.getpid()
    cached = _rank_cache
    if cached is not None and cached[0] == pid:
        return cached[1]
    rank = global_rank()
    _rank_cache = (pid, rank)
    return rank


def _sink() -> tuple[socket.socket, tuple[str, int]] | None:
    """The agent's metrics socket for this process (None when it serves no metrics)."""
    global _sink_cache
    pid = os.getpid()
    cached = _sink_cache
    if cached is not None and cached[0] == pid:
        return cached[1]
    sink = None
    host, _, port = os.environ.get(METRICS_UDP_ENV, "").rpartition(":")
    if host and port.isdigit():
        with contextlib.suppress(OSError):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sink = (sock, (host, int(port)))
    _sink_cache = (pid, sink)
    return sink


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    with contextlib.suppress(Exception):
        sys.stderr.write(f"ktrain.report: {message} (further such values are dropped quietly)\n")


def _number(name: str, value: object) -> float | None:
    if isinstance(value, bool):
        value = int(value)
    if type(value) is float or type(value) is int:
        v = float(value)
    else:
        try:
            v = float(value)  # type: ignore[arg-type]  # numpy/torch scalars
        except (TypeError, ValueError):
            _warn_once(name, f"{name}={value!r} is not a number; dropped")
            return None
    if not math.isfinite(v):
        _warn_once(name, f"{name}={v} is not finite; dropped")
        return None
    return v


def _step(step: object) -> int | None:
    if step is None:
        return None
    try:
        s: int = int(step)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        _warn_once("step", f"step={step!r} is not an integer; reported without a step")
        return None
    return s


def _total(total: object) -> int | None:
    if total is None:
        return None
    try:
        n: int = int(total)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        n = 0
    if n <= 0:
        _warn_once("total", f"total={total!r} is not a positive integer; progress not reported")
        return None
    return n


def report(step: int | None = None, total: int | None = None, **metrics: float) -> None:
    """Report training metrics at ``step`` (of ``total``) from the calling rank (see module
    docstring)."""
    rank = _rank()
    if rank is None:
        return
    try:
        t = round(time.time(), 3)
        s = _step(step)
        n = _total(total) if s is not None else None
        values: dict[str, float] = {}
        for name, value in metrics.items():
            if name in RESERVED_KEYS:
                _warn_once(name, f"{name!r} is a reserved name; dropped")
                continue
            v = _number(name, value)
            if v is not None:
                values[name] = v
        record = Metric(rank, t, s, n, values).to_dict()
        _write(record)
        for listener in _listeners:
            listener(record)
    except Exception as exc:
        _warn_once("__error__", f"could not write a metric record ({exc!r})")


def emit(record: Checkpoint | Resume) -> None:
    """Write one record of another ``type`` (a checkpoint saved, a resume) from the calling
    rank the way :func:`report` writes metrics, with ``rank`` and ``t`` added; a no-op outside
    a job. Raises what writing raises (the caller decides what a failure means)."""
    rank = _rank()
    if rank is not None:
        _write({**record.to_dict(), "rank": rank, "t": round(time.time(), 3)})


def _write(record: dict[str, Any]) -> None:
    line = format_record(record) + "\n"
    with _lock:
        out = sys.stdout
        out.write(line)
        out.flush()
    sink = _sink()
    if sink is not None:
        with contextlib.suppress(OSError):  # the agent is gone or its buffer is full
            sink[0].sendto(line[len(RECORD_MARK) :].encode(), sink[1])
