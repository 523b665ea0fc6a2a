"""The agent's Prometheus endpoint: the node's GPU samples and its ranks' ``ktrain.report``
metrics in Prometheus text format (0.0.4) at ``http://HOST:PORT/metrics``. Standard library
only (this travels into the job). Off unless the agent gets ``--metrics-port``.

What it serves, one gauge per family, always the latest value::

    ktrain_gpu_utilization_percent{job,replica,node,gpu,uuid}
    ktrain_gpu_memory_used_bytes / ktrain_gpu_memory_total_bytes   {job,replica,node,gpu,uuid}
    ktrain_gpu_power_watts / ktrain_gpu_temperature_celsius        {job,replica,node,gpu,uuid}
    ktrain_metric{job,replica,node,rank,name}    the last value ``ktrain.report`` gave ``name``
    ktrain_step{job,replica,node,rank}           the step of that rank's last report

How the ranks' metrics reach it: the agent listens on a UDP port of 127.0.0.1 and passes its
address to the node command as ``KTRAIN_METRICS_UDP``; ``ktrain.report`` sends its records
there besides writing their log lines, several in one datagram (one record a line, as it writes
them together: :mod:`..report`); a send never blocks training, and a datagram the agent misses
is a few samples fewer, the log keeps every record.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..protocol import METRIC, metric_values, record_type

__all__ = ["MetricsEndpoint", "MetricsStore", "ReportListener"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_MIB = 1024 * 1024

# record field -> (family, help, scale to the family's unit)
GPU_FAMILIES: dict[str, tuple[str, str, float]] = {
    "util": ("ktrain_gpu_utilization_percent", "GPU busy time in the last sample period", 1.0),
    "mem_used": ("ktrain_gpu_memory_used_bytes", "GPU memory in use", _MIB),
    "mem_total": ("ktrain_gpu_memory_total_bytes", "GPU memory in all", _MIB),
    "power": ("ktrain_gpu_power_watts", "GPU power draw", 1.0),
    "temp": ("ktrain_gpu_temperature_celsius", "GPU core temperature", 1.0),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class MetricsStore:
    """The latest value of every series; fed from the sampler and report threads, read by
    the HTTP thread (one lock). ``base`` are the labels every sample carries (job, replica,
    node), in that order."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self.base = tuple((k, str(v)) for k, v in base.items())
        self._lock = threading.Lock()
        self._gpu: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._metric: dict[tuple[tuple[str, str], ...], float] = {}
        self._step: dict[tuple[tuple[str, str], ...], float] = {}

    def gpu(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Take one sampler tick (:data:`~jupyter_ktrain.pod.protocol.GPU` records)."""
        with self._lock:
            for rec in records:
                labels = (*self.base, ("gpu", str(rec.get("gpu"))), ("uuid", str(rec.get("uuid"))))
                for field, (family, _help, scale) in GPU_FAMILIES.items():
                    value = rec.get(field)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        self._gpu[(family, labels)] = float(value) * scale

    def report(self, rec: Mapping[str, Any]) -> None:
        """Take one ``ktrain.report`` record (:data:`~jupyter_ktrain.pod.protocol.METRIC`);
        its :data:`~jupyter_ktrain.pod.protocol.RESERVED_KEYS` (``total`` too) are no metrics."""
        rank = rec.get("rank")
        if record_type(rec) != METRIC or not isinstance(rank, int):
            return
        who = (*self.base, ("rank", str(rank)))
        with self._lock:
            step = rec.get("step")
            if isinstance(step, int) and not isinstance(step, bool):
                self._step[who] = float(step)
            for name, value in metric_values(rec).items():
                self._metric[(*who, ("name", name))] = value

    def render(self) -> str:
        """Everything, in Prometheus text exposition format 0.0.4."""
        with self._lock:
            gpu, metric, step = dict(self._gpu), dict(self._metric), dict(self._step)
        out: list[str] = []
        for family, help_text, _scale in GPU_FAMILIES.values():
            rows = [(labels, v) for (f, labels), v in gpu.items() if f == family]
            _family(out, family, help_text, rows)
        _family(out, "ktrain_metric", "last value a rank reported with ktrain.report", metric)
        _family(out, "ktrain_step", "step of a rank's last ktrain.report", step)
        return "\n".join(out) + "\n"


def _family(
    out: list[str],
    name: str,
    help_text: str,
    rows: Iterable[tuple[tuple[tuple[str, str], ...], float]] | Mapping[Any, float],
) -> None:
    items = sorted(rows.items() if isinstance(rows, Mapping) else rows)
    if not items:
        return
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} gauge")
    out += [f"{name}{_labels(labels)} {_number(value)}" for labels, value in items]


class MetricsEndpoint:
    """``GET /metrics`` over :class:`MetricsStore` on a daemon thread (``port`` 0: any)."""

    def __init__(self, store: MetricsStore, host: str, port: int) -> None:
        self.store = store
        self._server = ThreadingHTTPServer((host, port), _handler(store))
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ktrain-metrics-http", daemon=True
        )

    def start(self) -> MetricsEndpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._server.shutdown()
            self._server.server_close()


def _handler(store: MetricsStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # http.server's method name
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            body = store.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return  # a scrape every 15 s must not fill the job's log

    return Handler


class ReportListener:
    """Receives ``ktrain.report`` records as UDP datagrams on 127.0.0.1 (see module doc)."""

    def __init__(self, store: MetricsStore) -> None:
        self.store = store
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.5)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ktrain-metrics-udp", daemon=True)

    def start(self) -> ReportListener:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(65536)
            except OSError:  # timeout (to see stop), or the socket was closed
                continue
            for part in data.splitlines():  # a rank sends its records in batches, one a line
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    rec = json.loads(part)
                    if isinstance(rec, dict):
                        self.store.report(rec)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        with contextlib.suppress(OSError):
            self._sock.close()
