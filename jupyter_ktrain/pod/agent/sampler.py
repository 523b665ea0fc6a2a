"""GPU sampling in the per-replica agent: NVML at 1 Hz for the GPUs this container was given.

Each sample is one ``[agent]: @@ktrain {"type":"gpu",...}`` line per GPU::

    {"type":"gpu","node":0,"gpu":0,"uuid":"GPU-...","t":1763700000.1,
     "util":97.0,"mem_used":40960.0,"mem_total":81559.0,"power":612.3,"temp":64.0}

(``util`` in %, memory in MiB, ``power`` in W, ``temp`` in °C; a field NVML cannot read on
this GPU is left out.) ``gpu`` is the index among this replica's GPUs, in NVML order.

Which GPUs: NVML enumerates every GPU the process can open and ignores CUDA_VISIBLE_DEVICES.
In a container the NVIDIA runtime exposes only the assigned GPUs; on a shared host
(the local backend) NVML sees them all, so the local backend names each node's GPUs by UUID in
``KTRAIN_GPU_UUIDS``. Otherwise :func:`select_gpus` narrows NVML's list with
``NVIDIA_VISIBLE_DEVICES`` then ``CUDA_VISIBLE_DEVICES``, matching UUIDs (full or prefix,
with or without ``GPU-``) or indices. Indices in ``CUDA_VISIBLE_DEVICES`` follow NVML's PCI
order, which is CUDA's only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; UUIDs are exact.

Contract: sampling never crashes nor slows the training. NVML is imported lazily; when it
is missing or finds no GPU the sampler says so in one info line and stays off. It runs on
its own daemon thread; a failing sample is reported once as a warning, later failures are
swallowed, and after ``max_failures`` consecutive failures sampling stops with one line.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..protocol import Gpu, format_agent_line, format_record

__all__ = ["GPU_UUIDS_ENV", "GpuInfo", "Nvml", "PynvmlNvml", "Sampler", "list_gpus", "select_gpus"]

_MIB = 1024 * 1024
GPU_UUIDS_ENV = "KTRAIN_GPU_UUIDS"


class Nvml(Protocol):
    """The slice of NVML the sampler uses (seam: :class:`PynvmlNvml` or a test fake).

    Any method may raise; ``init`` raising means "no NVML here".
    """

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int: ...
    def handle(self, index: int) -> Any: ...
    def uuid(self, handle: Any) -> str: ...
    def utilization(self, handle: Any) -> float: ...
    def memory(self, handle: Any) -> tuple[int, int]: ...  # (used, total) bytes
    def power_watts(self, handle: Any) -> float: ...
    def temperature_c(self, handle: Any) -> float: ...


class PynvmlNvml:
    """:class:`Nvml` over ``nvidia-ml-py`` (module ``pynvml``), imported on first use.

    ``module`` stands in for ``pynvml`` in tests. Memory is read with
    ``nvmlDeviceGetMemoryInfo_v2`` where the driver has it: the older call counts the memory
    the driver reserves for itself as used (~480 MiB on an idle H100 that nvidia-smi shows at
    0 MiB); drivers or bindings without v2 get the old call.
    """

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._nv: Any = None
        self._memory_v2: bool | None = None  # None: not tried yet

    def init(self) -> None:
        if self._module is None:
            import pynvml

            self._module = pynvml
        self._module.nvmlInit()
        self._nv = self._module

    def shutdown(self) -> None:
        if self._nv is not None:
            self._nv.nvmlShutdown()

    def device_count(self) -> int:
        return int(self._nv.nvmlDeviceGetCount())

    def handle(self, index: int) -> Any:
        return self._nv.nvmlDeviceGetHandleByIndex(index)

    def uuid(self, handle: Any) -> str:
        value = self._nv.nvmlDeviceGetUUID(handle)
        return value.decode() if isinstance(value, bytes) else str(value)

    def utilization(self, handle: Any) -> float:
        return float(self._nv.nvmlDeviceGetUtilizationRates(handle).gpu)

    def memory(self, handle: Any) -> tuple[int, int]:
        if self._memory_v2 is not False:
            try:
                info = self._nv.nvmlDeviceGetMemoryInfo(handle, version=self._nv.nvmlMemory_v2)
            except Exception:
                if self._memory_v2:  # v2 worked before: this is a real failure
                    raise
                self._memory_v2 = False  # old driver (function not found) or old bindings
            else:
                self._memory_v2 = True
                return int(info.used), int(info.total)
        info = self._nv.nvmlDeviceGetMemoryInfo(handle)
        return int(info.used), int(info.total)

    def power_watts(self, handle: Any) -> float:
        return float(self._nv.nvmlDeviceGetPowerUsage(handle)) / 1000.0

    def temperature_c(self, handle: Any) -> float:
        return float(self._nv.nvmlDeviceGetTemperature(handle, self._nv.NVML_TEMPERATURE_GPU))


@dataclass(frozen=True)
class GpuInfo:
    nvml_index: int
    uuid: str


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def _uuid_match(entry: str, uuid: str) -> bool:
    e, u = entry.lower(), uuid.lower()
    if not e.startswith("gpu-") and u.startswith("gpu-"):
        u = u[4:]
    return u.startswith(e)


def _pick(gpus: list[GpuInfo], entries: list[str], by_position: bool) -> list[GpuInfo]:
    chosen: list[GpuInfo] = []
    for entry in entries:
        if entry.lstrip("-").isdigit():
            n = int(entry)
            if n < 0:  # CUDA stops at the first invalid index
                break
            pool = [g for g in gpus if (gpus.index(g) if by_position else g.nvml_index) == n]
        else:
            pool = [g for g in gpus if _uuid_match(entry, g.uuid)]
        chosen.extend(g for g in pool if g not in chosen)
    return chosen


def select_gpus(gpus: Sequence[GpuInfo], env: Mapping[str, str]) -> list[GpuInfo]:
    """The GPUs of ``gpus`` (NVML's list) that this replica was given (see module docstring).

    :data:`GPU_UUIDS_ENV` (set by the local backend, which splits one machine's GPUs between
    its nodes) names them exactly and wins over the ``*_VISIBLE_DEVICES`` variables.
    """
    exact = env.get(GPU_UUIDS_ENV)
    if exact is not None:
        return _pick(list(gpus), [e for e in _entries(exact) if not e.isdigit()], False)
    chosen = list(gpus)
    nvd = env.get("NVIDIA_VISIBLE_DEVICES")
    if nvd is not None and nvd.strip().lower() not in ("all",):
        if nvd.strip().lower() in ("", "none", "void"):
            return []
        entries = _entries(nvd)
        all_indices = all(e.isdigit() for e in entries)
        # In a container NVML already shows just the assigned GPUs, renumbered from 0: host
        # indices only make sense when NVML still sees more GPUs than were assigned.
        if not (all_indices and len(chosen) == len(entries)):
            chosen = _pick(chosen, entries, by_position=False)
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        chosen = _pick(chosen, _entries(cvd), by_position=True)
    return chosen


def list_gpus(nvml: Nvml | None = None) -> list[GpuInfo]:
    """Every GPU NVML sees on this machine, in NVML (PCI bus) order; raises when NVML cannot
    be loaded or initialised."""
    nv: Nvml = nvml if nvml is not None else PynvmlNvml()
    nv.init()
    try:
        return [GpuInfo(i, nv.uuid(nv.handle(i))) for i in range(nv.device_count())]
    finally:
        with contextlib.suppress(Exception):
            nv.shutdown()


def _say(text: str) -> None:
    """One agent line, written with one ``os.write`` so it never interleaves mid-line."""
    os.write(1, (format_agent_line(text) + "\n").encode())


class Sampler:
    """Samples the selected GPUs every ``interval`` seconds on a daemon thread.

    ``start()`` returns False (after one info line) when NVML is unavailable or no GPU is
    assigned. ``emit`` receives each finished line (default: stdout, one write per line);
    ``on_sample`` each tick's records.
    """

    def __init__(
        self,
        nvml: Nvml | None = None,
        *,
        interval: float = 1.0,
        node: int = 0,
        env: Mapping[str, str] | None = None,
        emit: Callable[[str], None] = _say,
        clock: Callable[[], float] = time.time,
        max_failures: int = 30,
        on_sample: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.nvml: Nvml = nvml if nvml is not None else PynvmlNvml()
        self.interval = interval
        self.node = node
        self.env = env if env is not None else os.environ
        self.emit = emit
        self.clock = clock
        self.max_failures = max_failures
        self.on_sample = on_sample  # e.g. the Prometheus endpoint's store
        self.gpus: list[tuple[int, Any, str]] = []  # (our index, handle, uuid)
        self.samples = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned = False

    def open(self) -> bool:
        """Initialise NVML and pick the GPUs; False (with one info line) when there are none."""
        try:
            self.nvml.init()
        except Exception as exc:
            self.emit(f"GPU sampling off: NVML not available ({type(exc).__name__}: {exc})")
            return False
        try:
            found = [
                GpuInfo(i, self.nvml.uuid(self.nvml.handle(i)))
                for i in range(self.nvml.device_count())
            ]
            mine = select_gpus(found, self.env)
            self.gpus = [(k, self.nvml.handle(g.nvml_index), g.uuid) for k, g in enumerate(mine)]
        except Exception as exc:
            self.emit(f"GPU sampling off: cannot list GPUs ({type(exc).__name__}: {exc})")
            self._shutdown()
            return False
        if not self.gpus:
            self.emit(f"GPU sampling off: no GPU assigned (NVML sees {len(found)})")
            self._shutdown()
            return False
        uuids = ", ".join(u for _, _, u in self.gpus)
        self.emit(f"GPU sampling on: {len(self.gpus)} GPU(s) every {self.interval:g}s ({uuids})")
        return True

    def sample(self) -> list[dict[str, Any]]:
        """One reading of every selected GPU (fields NVML cannot read are left out)."""
        t = round(self.clock(), 3)
        records = []
        for k, handle, uuid in self.gpus:
            records.append(Gpu(self.node, k, uuid, t, **self._read(handle)).to_dict())
        return records

    def _read(self, handle: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        nv = self.nvml
        out["util"] = nv.utilization(handle)  # the one field we insist on: raise if it fails
        for key, fn in (("power", nv.power_watts), ("temp", nv.temperature_c)):
            try:
                out[key] = round(fn(handle), 1)
            except Exception:  # not supported on this GPU / MIG slice
                continue
        try:
            used, total = nv.memory(handle)
            out["mem_used"] = round(used / _MIB, 1)
            out["mem_total"] = round(total / _MIB, 1)
        except Exception:
            pass
        return out

    def tick(self) -> bool:
        """Sample and emit once; False when sampling should stop."""
        try:
            records = self.sample()
            for rec in records:
                self.emit(format_record(rec))
            if self.on_sample is not None:
                self.on_sample(records)
            self.samples += 1
            self.failures = 0
        except Exception as exc:
            self.failures += 1
            if not self._warned:
                self._warned = True
                self._safe_emit(f"warning: GPU sample failed ({type(exc).__name__}: {exc})")
            if self.failures >= self.max_failures:
                self._safe_emit(f"GPU sampling stopped: {self.failures} failed samples in a row")
                return False
        return True

    def _safe_emit(self, text: str) -> None:
        with contextlib.suppress(Exception):
            self.emit(text)

    def start(self) -> bool:
        if not self.open():
            return False
        self._thread = threading.Thread(target=self._run, name="ktrain-gpu-sampler", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        try:
            next_at = time.monotonic()
            while not self._stop.is_set():
                if not self.tick():
                    break
                next_at += self.interval
                delay = next_at - time.monotonic()
                if delay < 0:  # fell behind (suspended?): skip, do not burst
                    next_at, delay = time.monotonic(), 0.0
                self._stop.wait(delay)
        except BaseException:
            pass
        finally:
            self._shutdown()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.shutdown()
