"""Why a rank or pod failed, in one word and one sentence. Pure.

``classify(lines, exit_code, reason)`` looks at a rank's last lines, its container's exit code
and the kubelet's reason (``OOMKilled``, ``Evicted``...), and returns a :class:`Failure`:
``OOM``, ``NCCL timeout``, ``NCCL error``, ``import error``, ``CUDA error``, ``preemption`` or
``error``. The explanation never repeats the kind (``str(failure)`` is ``"{kind}: {explanation}"``)
and ends with what to do. ``signal_failure(code)`` explains a process killed by a signal (exit
code 128 + N), and :class:`TorchrunReport` reads torchrun's own failure report, which is the
only place that says which rank a signal killed (such a rank cannot report its own end).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "Failure",
    "TorchrunReport",
    "WorkerExit",
    "classify",
    "pod_problem",
    "ranks_text",
    "signal_failure",
    "signal_text",
]


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
_DUPLICATE_GPU = re.compile(
    r"Duplicate GPU detected : rank (\d+) and rank (\d+) both on CUDA device (\w+)"
)
_NCCL_ERROR = re.compile(
    r"(nccl(?:InvalidUsage|UnhandledCudaError|SystemError|InternalError|InvalidArgument"
    r"|RemoteError)\b|DistBackendError: NCCL error)"
)
_NCCL_LAST_ERROR = re.compile(r"^Last error:\s*\n(.+)$", re.MULTILINE)
_NCCL_HINTS = {
    "ncclInvalidUsage": "NCCL was called in a way it does not allow",
    "ncclUnhandledCudaError": "a CUDA call inside NCCL failed",
    "ncclSystemError": "a system call inside NCCL failed (network, /dev/shm, ulimits)",
    "ncclInternalError": "NCCL hit an internal error",
    "ncclInvalidArgument": "NCCL was given an invalid argument",
    "ncclRemoteError": "a peer rank failed or its connection broke",
}
_IMPORT = re.compile(r"(ModuleNotFoundError|ImportError): (.*)")
_CUDA = re.compile(
    r"CUDA error: (.*)"
    r"|(cudaError\w*|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|device-side assert triggered)"
)
_DEVICE_ASSERT = re.compile(r"Assertion `(.+)` failed")
_PREEMPT_REASONS = {"Evicted", "Preempting", "Preempted", "Shutdown", "NodeShutdown", "Terminated"}


def classify(
    lines: Sequence[str], exit_code: int | None = None, reason: str = "", memory_limit: str = ""
) -> Failure:
    """The most specific cause the evidence supports (kubelet reason first, then the text).
    ``memory_limit`` is the container's (``128Mi``), said with the kubelet's ``OOMKilled``."""
    text = "\n".join(lines[-200:])
    if reason == "OOMKilled":
        limit = f" ({memory_limit})" if memory_limit else ""
        return Failure(
            "OOM",
            f"OOMKilled: the container used more memory than its limit{limit} and the kernel "
            "killed it: raise --memory or --memory-limit, lower the batch size, or use fewer "
            "processes per node.",
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
    m = _DUPLICATE_GPU.search(text)
    if m:
        return Failure(
            "NCCL error",
            f"ranks {m.group(2)} and {m.group(1)} both use one GPU (bus id {m.group(3)}): each "
            "process needs its own GPU. Call torch.cuda.set_device(int(os.environ["
            "'LOCAL_RANK'])) before init_process_group, and run at most as many processes per "
            "node as it has GPUs (--procs-per-node <= --gpus-per-node).",
        )
    if _NCCL.search(text):
        return Failure(
            "NCCL timeout",
            "a collective operation timed out: a peer rank stalled or died, or the network "
            "between nodes is blocked. Look at the other ranks' last lines; check --rdma.",
        )
    m = _NCCL_ERROR.search(text)
    if m:
        return _nccl_error(m.group(1), text)
    m = _IMPORT.search(text)
    if m:
        return Failure(
            "import error",
            f"{m.group(1)}: {m.group(2).strip()}: the image lacks a package the cell uses; add "
            "it to the image or the cell's requirements.",
        )
    m = _CUDA.search(text)
    if m:
        return _cuda_error((m.group(1) or m.group(2)).strip(), text)
    if exit_code == 137:
        return Failure("OOM", "killed with SIGKILL (exit 137), most often the memory limit.")
    return Failure("error", f"exited with code {exit_code}." if exit_code is not None else "")


def _nccl_error(match: str, text: str) -> Failure:
    code = next((c for c in _NCCL_HINTS if c in text), "")
    what = _NCCL_HINTS.get(code, "a NCCL call failed")
    last = _NCCL_LAST_ERROR.search(text)
    detail = f" ({code}: {last.group(1).strip()})" if last else f" ({code or match})"
    return Failure(
        "NCCL error",
        f"{what}{detail}. Rerun with --env NCCL_DEBUG=WARN to see NCCL's own message; "
        "check that each rank has its own GPU (torch.cuda.set_device(LOCAL_RANK)).",
    )


def _cuda_error(message: str, text: str) -> Failure:
    if "device-side assert" in message:
        cause = _DEVICE_ASSERT.search(text)
        where = f" (`{cause.group(1)}`)" if cause else ""
        return Failure(
            "CUDA error",
            f"device-side assert triggered{where}: a GPU kernel's check failed, most often an "
            "index out of range (a class label >= the number of classes, a token id >= the "
            "vocabulary size). Rerun with --env CUDA_LAUNCH_BLOCKING=1 to see the failing op.",
        )
    return Failure(
        "CUDA error", f"{message}: rerun with --env CUDA_LAUNCH_BLOCKING=1 to see the failing op."
    )


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


def ranks_text(ranks: Iterable[int]) -> str:
    """``rank 2``, ``ranks 2 and 3``, ``ranks 0, 1 and 3``."""
    names = [str(r) for r in sorted(ranks)]
    if len(names) == 1:
        return f"rank {names[0]}"
    return f"ranks {', '.join(names[:-1])} and {names[-1]}"


_SIGNAL_BASE = 128
_CRASH_SIGNALS = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"}
_STOP_SIGNALS = {"SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"}


def signal_text(code: int | None) -> str | None:
    """``"signal 9 (SIGKILL)"`` for exit code 137 (128 + 9, the shell's convention), else None."""
    if code is None or not _SIGNAL_BASE < code <= _SIGNAL_BASE + 64:
        return None
    number = code - _SIGNAL_BASE
    try:
        return f"signal {number} ({signal.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def signal_failure(code: int | None) -> Failure | None:
    """Why a process killed by a signal ended, and what to do; None when ``code`` is no signal."""
    what = signal_text(code)
    if what is None:
        return None
    name = what.rsplit("(", 1)[-1].rstrip(")")
    if name == "SIGKILL":
        return Failure(
            "killed",
            "something outside the job killed it: most often the out-of-memory killer (the "
            "machine's or the container's memory ran out; `dmesg` says so), or a `kill -9`. "
            "If it was memory, lower the batch size or --procs-per-node.",
        )
    if name in _CRASH_SIGNALS:
        return Failure(
            "crash",
            f"it crashed in native code ({name}): a C/C++/CUDA extension or a mismatched "
            "install. Its last lines may name the operation; rerun it alone to reproduce.",
        )
    if name in _STOP_SIGNALS:
        return Failure(
            "stopped",
            f"something outside the job asked it to stop ({name}): a person, a scheduler or a "
            "shutdown. Run it again when that is over.",
        )
    return Failure("killed", f"it was killed by {what}.")


@dataclass(frozen=True)
class WorkerExit:
    """One entry of torchrun's failure report: a rank and how it ended. ``code`` is 128 + N
    for a rank killed by signal N; ``root`` marks torchrun's "first observed failure"."""

    rank: int
    code: int
    root: bool


_REPORT_RANK = re.compile(r"^rank\s*:\s*(\d+)\s*\(local_rank:")
_REPORT_EXIT = re.compile(r"^exitcode\s*:\s*(-?\d+)")


class TorchrunReport:
    """Reads the report torchrun prints when a worker fails (its ``ChildFailedError``: a
    "Failures:" section and a "Root Cause (first observed failure):" one, each entry with a
    ``rank : 2 (local_rank: 2)`` and an ``exitcode : -9 (pid: 123)`` line), one line of the
    node's own output at a time; :meth:`feed` returns each entry once it is complete."""

    def __init__(self) -> None:
        self._root = False
        self._rank: int | None = None

    def feed(self, line: str) -> WorkerExit | None:
        text = line.strip()
        if text.startswith(("Failures:", "Root Cause")):
            self._root, self._rank = text.startswith("Root Cause"), None
            return None
        m = _REPORT_RANK.match(text)
        if m:
            self._rank = int(m.group(1))
            return None
        m = _REPORT_EXIT.match(text)
        if m is None or self._rank is None:
            return None
        raw, rank, self._rank = int(m.group(1)), self._rank, None
        return WorkerExit(rank, _SIGNAL_BASE - raw if raw < 0 else raw, self._root)
