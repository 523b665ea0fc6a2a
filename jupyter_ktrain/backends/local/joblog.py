"""The output files of a local job (``node-K.log``, ``node-K.times``, ``rank-R.log``), appended
to whole by its supervisor, its warm supervisor and its watchdog alike (:class:`JobLog`), the
supervisor's own lines in its nodes' logs (:func:`tell_nodes`), and the words for a copy that
failed."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from ...pod.exits import STOP_WHY_ENV
from ...pod.protocol import format_agent_line
from ...store.files import open_append

__all__ = ["SIGNAL_BASE", "JobLog", "copy_error_text", "say_stop_why", "tell_nodes"]

SIGNAL_BASE = 128  # exit code of a process killed by signal N: 128 + N


class JobLog:
    """One output file of the job, appended to whole (a short write is continued); an error
    names the file."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open_append(path)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[self.file.write(view) or 0 :]
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()


def say_stop_why(env: Mapping[str, str], why: str | None) -> None:
    """Why the nodes are stopped, where each node's agent reads it when it words its end
    (:data:`~jupyter_ktrain.pod.exits.STOP_WHY_ENV`); None: an attempt starts, nothing said
    yet (an earlier job's word is forgotten). A write that fails is left out (the agent then
    says it was stopped from outside)."""
    path = env.get(STOP_WHY_ENV)
    if path:
        with contextlib.suppress(OSError):
            if why is None:
                Path(path).unlink(missing_ok=True)
            else:
                Path(path).write_text(why + "\n", encoding="utf-8")


def tell_nodes(job_dir: Path, text: str, nodes: Iterable[int]) -> None:
    """An ``[agent]:`` line at the end of each of ``nodes``' logs and its time, where
    ``%ktrain logs`` and the cell show it (a write that fails is left out)."""
    line = (format_agent_line(text) + "\n").encode()
    for node in nodes:
        with contextlib.suppress(OSError):
            times = JobLog(job_dir / f"node-{node}.times")
            log = JobLog(job_dir / f"node-{node}.log")
            try:
                times.write(b"%.6f\n" % time.time())
                log.write(line)
            finally:
                times.close()
                log.close()


def copy_error_text(exc: BaseException) -> str:
    """``No space left on device writing rank-3.log``."""
    if isinstance(exc, OSError) and exc.filename:
        return f"{exc.strerror or exc} writing {Path(str(exc.filename)).name}"
    return f"{type(exc).__name__}: {exc}"
