"""A rank's run of the job's program: what :mod:`.runtime` (one per local rank) runs, in its
own process or forked from the node's fork server (:mod:`.agent.forks`), and what a warm node
forks for each run (:mod:`.agent.warm`).

:func:`main` makes every line the rank writes (Python or C, stdout or stderr) start with
``[rank{N}]: `` so one node stream can be split by rank, runs the captured program as
``__main__`` (with :mod:`.integrations` hooked in, so a Transformers Trainer reports by
itself; the program's last line runs the cell, :mod:`.cell`, and rank 0 sends the cell's
results back as a structured record), points a traceback at the notebook's cells
(:mod:`.tracebacks`), answers ``ktrain stacks`` while it runs (:mod:`.stacks`) and ends
with an ``exit`` record carrying the rank's exit code. A rank that ``mpirun`` started gets the
variables ``torch.distributed``'s ``env://`` needs first (:mod:`.mpi`). Imports are kept
light: this runs before the user's code in every process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import runpy
import select
import signal
import sys
import threading
import time

from .exits import PEER_LOST, peer_lost, write_rank_code
from .mpi import rank_env
from .protocol import Exit, format_rank_line
from .ranks import global_rank, node_env
from .report import flush as flush_reports
from .stacks import serve as serve_stacks
from .tracebacks import name_cells_in_warnings, notebook_traceback

__all__ = ["die_with_parent", "exit_now", "main"]

STALL_S = 2.0
DRAIN_CAP_S = 300.0
_CHUNK = 65536


def _rank() -> int:
    """Global rank (:func:`.ranks.global_rank`); 0 for a program run by hand."""
    rank = global_rank()
    return rank if rank is not None else 0


class _Prefixer:
    """Routes fd 1 and 2 through pipes whose lines get the rank prefix."""

    def __init__(self, rank: int):
        self.rank = rank
        self.saved: dict[int, int] = {}
        self.threads: list[threading.Thread] = []
        self.moved = 0  # bytes pumped so far: progress while draining at exit
        self.idle: dict[int, bool] = {}  # pump waiting for input (not blocked downstream)

    def start(self) -> None:
        for fd in (1, 2):
            read_end, write_end = os.pipe()
            self.saved[fd] = os.dup(fd)
            os.dup2(write_end, fd)
            os.close(write_end)
            t = threading.Thread(target=self._pump, args=(read_end, self.saved[fd]), daemon=True)
            t.start()
            self.threads.append(t)
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]

    def _pump(self, read_end: int, out: int) -> None:
        prefix = format_rank_line(self.rank, "").encode()
        pending = b""
        while True:
            self.idle[read_end] = True
            chunk = os.read(read_end, _CHUNK)
            self.idle[read_end] = False
            if not chunk:
                break
            lines, pending = _split(pending, chunk)
            if lines:
                _write_lines(out, [prefix + line + b"\n" for line in lines])
            self.moved += len(chunk)
        if pending:
            _write_all(out, prefix + pending + b"\n")
        os.close(read_end)
        self.idle[read_end] = True  # finished: nothing left to wait for here

    def stop(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # in a signal handler, a write may be open
                stream.flush()
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)  # closes our pipe's write end: the pump sees EOF
        # Drain everything the rank wrote. A pump blocked writing downstream (a slow reader of
        # the node's output) is waited for as long as it takes, up to DRAIN_CAP_S; a pump that
        # waits for input for STALL_S with nothing moving is reading a pipe that a child
        # process the user started still holds open, and will never see its end.
        last, still, began = -1, time.monotonic(), time.monotonic()
        while any(t.is_alive() for t in self.threads):
            now = time.monotonic()
            if now - began > DRAIN_CAP_S:
                break
            if self.moved != last or not all(self.idle.values()):
                last, still = self.moved, now
            elif now - still > STALL_S:
                break
            for t in self.threads:
                t.join(timeout=0.05)

    def write_direct(self, text: str) -> None:
        os.write(self.saved.get(1, 1), text.encode())


def _split(pending: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """The whole lines of what was held (``pending``) and what was read now (``chunk``), and
    what is held still. A progress bar's frame (tqdm: ``\\r  0%| | 0/40``, no newline) that
    another write follows without a ``\\r`` of its own is a line of its own: the next text (a
    logger's line) is not glued to the bar."""
    lines: list[bytes] = []
    if b"\r" in pending and chunk[:1] not in (b"\r", b"\n"):
        lines.append(pending)
        pending = b""
    *more, pending = (pending + chunk).split(b"\n")
    lines += more
    if len(pending) > _CHUNK:  # a very long line without a newline: pass it on
        lines.append(pending)
        pending = b""
    return lines, pending


def _write_lines(fd: int, lines: list[bytes]) -> None:
    """Write whole lines in writes of at most PIPE_BUF bytes.

    Every rank of a node shares one pipe (the node's stdout); POSIX makes a pipe write of up
    to PIPE_BUF bytes atomic, so batching lines up to that size keeps each rank's lines whole
    while still writing many lines per system call. A single longer line is written alone.
    """
    batch: list[bytes] = []
    size = 0
    for line in lines:
        if batch and size + len(line) > select.PIPE_BUF:
            _write_all(fd, b"".join(batch))
            batch, size = [], 0
        batch.append(line)
        size += len(line)
    if batch:
        _write_all(fd, b"".join(batch))


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` may write only part of a large buffer to a pipe: write all of it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """SIGKILL when this process's parent ends (Linux ``PR_SET_PDEATHSIG``): a rank never
    outlives what started it (torchrun, or the node's fork server), as in a container, where
    the node's end is every process's end; the parent already gone: ends now."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it ended before the call took effect
        os._exit(128 + signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m jupyter_ktrain.pod.runtime PROGRAM.py\n")
        return 2
    program = os.path.abspath(argv[0])
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's own rank (its main thread starts it)
        die_with_parent()
    os.environ.update(rank_env(os.environ))  # an mpirun rank: RANK, MASTER_ADDR... for env://
    rank = _rank()
    os.environ.setdefault("RANK", str(rank))  # a TFJob's task, as every other kind names it
    for key, value in node_env().items():  # DeepSpeed's decoupled checkpoint writer needs them
        os.environ.setdefault(key, value)
    prefixer = _Prefixer(rank)
    prefixer.start()
    _drain_on_sigterm(prefixer)
    stacks = serve_stacks(rank, program, os.environ)  # `ktrain stacks` asks it
    code = 0
    write_rank_code(rank, None)  # started: a rank that leaves no code was killed
    _integrations(rank)
    try:
        sys.path.insert(0, os.path.dirname(program))
        sys.argv = [program]
        name_cells_in_warnings(program)
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:
        flush_reports()  # the records it reported come before its traceback
        sys.stderr.write("".join(notebook_traceback(exc, program)))
        code = PEER_LOST if peer_lost(exc) else 1
    flush_reports()
    code = _checkpoints_written(code, program)
    if stacks is not None:
        stacks.close()
    write_rank_code(rank, code)
    prefixer.stop()
    record = Exit(rank, code).format()
    prefixer.write_direct(format_rank_line(rank, record) + "\n")
    return code


def _drain_on_sigterm(prefixer: _Prefixer) -> None:
    """A rank stopped from outside (SIGTERM: its pod deleted, torchrun stopping its ranks)
    still ends as SIGTERM ends it, but first the lines it wrote reach the node's stream: they
    wait in the prefix pipes, which died with the process (found on a real node: a SIGTERM
    handler that saved a checkpoint and handed the signal on lost the lines it printed). A
    handler of the user's replaces this one; one that hands the signal on to the handler it
    replaced (``signal.signal(SIGTERM, previous)``, then ``os.kill``) drains too."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def drain_then_die(signum: int, _frame: object) -> None:
        with contextlib.suppress(Exception):
            flush_reports()
        prefixer.stop()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    with contextlib.suppress(ValueError):  # not the main thread: leave SIGTERM as it is
        signal.signal(signal.SIGTERM, drain_then_die)


def _checkpoints_written(code: int, program: str) -> int:
    """Wait for a checkpoint still being written in the background (``ktrain.checkpoint``):
    a rank that ends has its last checkpoint on disk. A write that failed fails the rank."""
    ckpt = sys.modules.get(f"{__package__}.checkpoint.plain")
    if ckpt is None:
        return code
    try:
        ckpt.wait_all()
    except BaseException as exc:
        sys.stderr.write("".join(notebook_traceback(exc, program)))
        return code or 1
    return code


def _integrations(rank: int) -> None:
    """Training libraries the program imports report by themselves (:mod:`.integrations`);
    in a TrainJob with the Trainer's status endpoint, rank 0 also feeds trainerStatus."""
    try:
        from .integrations import install

        install()
        if rank == 0 and os.environ.get("KUBEFLOW_TRAINER_SERVER_URL"):
            from .trainer_status import enable

            enable()
    except Exception as exc:  # reporting never keeps the program from running
        print(f"jupyter-ktrain: integrations off ({exc!r})", file=sys.stderr)


def exit_now(code: int) -> None:
    """Run atexit handlers, then leave without interpreter teardown.

    The job's verdict is already out. Tearing down torch's C++ state (a DDP reducer that
    outlived its process group, gloo threads) can abort the process after the user's code
    succeeded, which would turn a finished rank into a failed one.
    """
    import atexit

    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
