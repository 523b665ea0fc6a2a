"""Why a rank or pod failed, in one word and one sentence. Pure.

``classify(lines, exit_code, reason)`` looks at a rank's last lines, its container's exit code
and the kubelet's reason (``OOMKilled``, ``Evicted``...), and returns a :class:`Failure`:
``OOM``, ``NCCL timeout``, ``import error``, ``CUDA error``, ``preemption`` or ``error``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Failure", "classify", "pod_problem"]


@dataclass(frozen=True)
class Failure:
    kind: str
    explanation: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.explanation}"


_NCCL = re.compile(
    r"(Watchdog caught collective operation timeout|NCCL (communicator|operation).*time(d)? ?out"
    r"|ProcessGroupNCCL.*[Tt]imeout|Socket Timeout|DistStoreError.*[Tt]imeout"
    r"|collective operation timeout)"
)
_OOM = re.compile(r"(CUDA out of memory|OutOfMemoryError|MemoryError\b|Cannot allocate memory)")
_IMPORT = re.compile(r"(ModuleNotFoundError|ImportError): (.*)")
_CUDA = re.compile(r"(CUDA error: .*|cudaError\w*|CUBLAS_STATUS_\w+|device-side assert triggered)")
_PREEMPT_REASONS = {"Evicted", "Preempting", "Preempted", "Shutdown", "NodeShutdown", "Terminated"}


def classify(lines: Sequence[str], exit_code: int | None = None, reason: str = "") -> Failure:
    """The most specific cause the evidence supports (kubelet reason first, then the text)."""
    text = "\n".join(lines[-200:])
    if reason == "OOMKilled":
        return Failure(
            "OOM",
            "the container used more memory than its limit and the kernel killed it: raise "
            "--memory, lower the batch size, or use fewer processes per node.",
        )
    if reason in _PREEMPT_REASONS or (exit_code == 143 and not text.strip()):
        return Failure(
            "preemption",
            f"the pod was stopped from outside ({reason or 'SIGTERM'}): a higher-priority job "
            "or node maintenance took the node. Resubmit, or use --priority-class.",
        )
    m = _OOM.search(text)
    if m:
        return Failure(
            "OOM",
            f"out of memory ({m.group(1)}): lower the batch size or model size per GPU, or "
            "use DeepSpeed/ZeRO (--deepspeed zero2).",
        )
    if _NCCL.search(text):
        return Failure(
            "NCCL timeout",
            "a collective operation timed out: a peer rank stalled or died, or the network "
            "between nodes is blocked. Look at the other ranks' last lines; check --rdma.",
        )
    m = _IMPORT.search(text)
    if m:
        return Failure(
            "import error",
            f"{m.group(1)}: {m.group(2).strip()}: the image lacks a package the cell uses; add "
            "it to the image or the cell's requirements.",
        )
    m = _CUDA.search(text)
    if m:
        return Failure("CUDA error", f"{m.group(1).strip()}: rerun with CUDA_LAUNCH_BLOCKING=1.")
    if exit_code == 137:
        return Failure("OOM", "killed with SIGKILL (exit 137), most often the memory limit.")
    return Failure("error", f"exited with code {exit_code}." if exit_code is not None else "")


def pod_problem(pod: dict[str, object]) -> str:
    """A waiting/terminated container reason worth showing (ImagePullBackOff, OOMKilled...)."""
    status = pod.get("status") or {}
    assert isinstance(status, dict)
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") and waiting["reason"] not in ("ContainerCreating",):
            return f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
        term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated") or {}
        if term.get("reason") and term.get("reason") != "Completed":
            return f"{term['reason']} (exit {term.get('exitCode')})"
    reason = status.get("reason")
    if reason:
        return f"{reason}: {status.get('message', '')}".rstrip(": ")
    return ""
