"""``ktrain.report(step=..., total=..., loss=...)``: training metrics and progress for the monitor.

Inside a job's rank process (any kind: :func:`jupyter_ktrain.pod.ranks.global_rank` finds its
rank) each call writes one structured record line to ``sys.stdout``::

    @@ktrain {"type":"metric","rank":0,"t":1763700000.123,"step":10,"loss":0.52}

The in-rank runtime prefixes every stdout line with ``[rank{N}]: ``; the monitor separates
these records from what the user prints. Outside a job (in the notebook kernel) ``report`` is
a no-op. ``total`` (the step count the job will reach) makes the record a progress update too:
the monitor shows percent done and time left from it (:mod:`jupyter_ktrain.pod.progress`);
a call with only ``step`` and ``total`` updates progress without plotting anything.

Contract: a call costs a few microseconds, is safe from any thread, and never raises into
training: a value that is not a finite number, a reserved name or a bad step is dropped with
one warning on stderr per name.

A call makes no system call: the training loop must not feel it. A write to the rank's stdout
wakes the thread that prefixes its lines (:mod:`.program`), and on a busy machine (a tracking
server, the follow loop, the other ranks on the same cores) each such wake-up cost the step
milliseconds, far more than the record itself. So records are held in this process, in order,
and written together (one ``write``) once the oldest is :data:`FLUSH_S` old or they reach
:data:`FLUSH_BYTES`, by the next call or by a small thread that looks twice per
:data:`FLUSH_S`; :func:`emit` (a checkpoint, a resume) and :func:`flush` (the rank's end)
write at once, after what is held, and so do a checkpoint's save (the steps it covers are
out before a resume could skip them) and the process's end (``atexit``). Held records are lost
only with the process killed (a signal: the steps since its last checkpoint, which a resume
reports again).

When the node's agent serves Prometheus metrics it sets ``KTRAIN_METRICS_UDP`` (``HOST:PORT``
on 127.0.0.1); each batch of records then also goes there as one non-blocking datagram (one
record a line).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .profiling.steps import mark as mark_step
from .protocol import RECORD_MARK, RESERVED_KEYS, Checkpoint, Metric, Resume, format_record
from .ranks import global_rank

__all__ = ["FLUSH_BYTES", "FLUSH_S", "add_listener", "emit", "flush", "report"]

FLUSH_S = 0.1  # a record waits at most this long in the rank before it is written
FLUSH_BYTES = 16384  # or until this much is held
_LOOK_S = 0.05  # how often the flusher thread looks for records held too long
_lock = threading.Lock()
_held: list[str] = []  # records not written yet, in order
_held_bytes = 0
_oldest = 0.0  # when the oldest held record came (time.monotonic)
_flusher_pid = 0  # the process whose flusher thread runs (a forked child starts its own)
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
        if s is not None:
            mark_step(s)  # a step boundary (`ktrain profile` starts and stops at them)
    except Exception as exc:
        _warn_once("__error__", f"could not write a metric record ({exc!r})")


def emit(record: Checkpoint | Resume) -> None:
    """Write one record of another ``type`` (a checkpoint saved, a resume) from the calling
    rank the way :func:`report` writes metrics, with ``rank`` and ``t`` added; a no-op outside
    a job. Raises what writing raises (the caller decides what a failure means)."""
    rank = _rank()
    if rank is not None:
        _write({**record.to_dict(), "rank": rank, "t": round(time.time(), 3)}, now=True)


def flush() -> None:
    """Write every record held (the rank's end: :func:`.program.main` calls it); never
    raises (stdout gone: they are lost with it)."""
    with contextlib.suppress(Exception), _lock:
        _write_held()


def _write(record: dict[str, Any], now: bool = False) -> None:
    """Hold ``record``'s line; write what is held when it is due (or ``now``)."""
    global _held_bytes, _oldest
    line = format_record(record) + "\n"
    t = time.monotonic()
    with _lock:
        if not _held:
            _oldest = t
        _held.append(line)
        _held_bytes += len(line)
        if now or _held_bytes >= FLUSH_BYTES or t - _oldest >= FLUSH_S:
            _write_held()
    if _flusher_pid != os.getpid():
        _start_flusher()


def _write_held() -> None:
    """Write the held records as one ``write`` (and one datagram); the caller holds ``_lock``."""
    global _held_bytes
    if not _held:
        return
    lines = list(_held)
    _held.clear()
    _held_bytes = 0
    out = sys.stdout
    out.write("".join(lines))
    out.flush()
    sink = _sink()
    if sink is not None:
        records = "".join(line[len(RECORD_MARK) :] for line in lines)
        with contextlib.suppress(OSError):  # the agent is gone or its buffer is full
            sink[0].sendto(records.encode(), sink[1])


def _start_flusher() -> None:
    """The thread that writes records held for :data:`FLUSH_S` when no new call comes."""
    global _flusher_pid
    with _lock:
        if _flusher_pid == os.getpid():
            return
        _flusher_pid = os.getpid()
    threading.Thread(target=_flush_stale, name="ktrain-report", daemon=True).start()


def _flush_stale() -> None:
    pid = os.getpid()
    while _flusher_pid == pid:
        time.sleep(_LOOK_S)
        with contextlib.suppress(Exception), _lock:  # reporting never raises into training
            if _held and time.monotonic() - _oldest >= FLUSH_S:
                _write_held()


def _forked() -> None:
    """A forked child (a DataLoader worker) starts empty: its parent writes what it held."""
    global _lock, _held_bytes
    _lock = threading.Lock()
    _held.clear()
    _held_bytes = 0


os.register_at_fork(after_in_child=_forked)
atexit.register(flush)  # a process that ends by itself (not killed) writes what it held
