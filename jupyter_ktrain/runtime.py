"""The in-rank entry point: ``python -m jupyter_ktrain.runtime PROGRAM``.

torchrun starts one of these per local rank. It makes every line the rank writes (Python or C,
stdout or stderr) start with ``[rank{N}]: `` so one node stream can be split by rank, runs the
captured program as ``__main__``, and on rank 0 sends the cell's results back as a structured
record. Every rank ends with an ``exit`` record carrying its exit code. A rank that ``mpirun``
started gets the variables ``torch.distributed``'s ``env://`` needs first (:mod:`.mpi`). Imports
are kept light: this runs before the user's code in every process.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import os
import pickle
import runpy
import select
import sys
import threading
import time
import traceback
from typing import Any

from .monitor.protocol import format_rank_line, format_record
from .mpi import rank_env

__all__ = ["main", "run_cell"]

MAX_RESULT_BYTES = 8 * 1024 * 1024
STALL_S = 2.0
DRAIN_CAP_S = 300.0
_CHUNK = 65536


def _rank() -> int:
    """Global rank: torchrun's RANK, MPI's, or the TF_CONFIG task (chief first)."""
    for key in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    tf_config = os.environ.get("TF_CONFIG")
    if tf_config:
        import json

        try:
            config = json.loads(tf_config)
            task, cluster = config["task"], config.get("cluster", {})
            order = [t for t in ("chief", "master") if t in cluster] + ["worker", "ps"]
            rank = 0
            for kind in order:
                if kind == task["type"]:
                    return rank + int(task["index"])
                rank += len(cluster.get(kind, []))
        except (ValueError, KeyError, TypeError):
            return 0
    return 0


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
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > _CHUNK:  # a very long line without a newline: pass it on
                lines.append(pending)
                pending = b""
            if lines:
                _write_lines(out, [prefix + line + b"\n" for line in lines])
            self.moved += len(chunk)
        if pending:
            _write_all(out, prefix + pending + b"\n")
        os.close(read_end)
        self.idle[read_end] = True  # finished: nothing left to wait for here

    def stop(self) -> None:
        for stream in (sys.stdout, sys.stderr):
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


def _split_last_expression(cell: str) -> tuple[ast.Module, ast.Expression | None]:
    tree = ast.parse(cell)
    tail = tree.body[-1] if tree.body else None
    if isinstance(tail, ast.Expr):
        tree.body.pop()
        return tree, ast.Expression(tail.value)
    return tree, None


def run_cell(cell: str, namespace: dict[str, Any]) -> Any:
    """Execute the ``%%ktrain`` cell in the program's globals; rank 0 reports its results.

    The results are the names the cell binds at top level, plus ``_`` for a trailing
    expression, pickled for the notebook. A name whose value cannot be pickled is skipped with
    a warning; it never fails the job.
    """
    body, last = _split_last_expression(cell)
    exec(compile(body, "<%%ktrain cell>", "exec"), namespace)
    value = eval(compile(last, "<%%ktrain cell>", "eval"), namespace) if last else None
    if _rank() != 0:
        return value
    names = namespace.get("_KTRAIN_RESULT_NAMES", [])
    results = {n: namespace[n] for n in names if n in namespace}
    if last is not None:
        results["_"] = value
    _emit_results(results)
    return value


def _emit_results(results: dict[str, Any]) -> None:
    payload: dict[str, bytes] = {}
    for name, value in results.items():
        try:
            payload[name] = pickle.dumps(value, protocol=4)
        except Exception as exc:  # the job still succeeded: say what did not come back
            print(f"jupyter-ktrain: result {name!r} cannot be sent back ({exc}); skipped.")
    if sum(len(v) for v in payload.values()) > MAX_RESULT_BYTES:
        print("jupyter-ktrain: results are over 8 MiB; save them to storage instead. Skipped.")
        return
    encoded = {k: base64.b64encode(v).decode("ascii") for k, v in payload.items()}
    sys.stdout.flush()
    print(format_record({"type": "result", "values": encoded}), flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m jupyter_ktrain.runtime PROGRAM.py\n")
        return 2
    program = os.path.abspath(argv[0])
    os.environ.update(rank_env(os.environ))  # an mpirun rank: RANK, MASTER_ADDR... for env://
    rank = _rank()
    prefixer = _Prefixer(rank)
    prefixer.start()
    code = 0
    try:
        sys.path.insert(0, os.path.dirname(program))
        sys.argv = [program]
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    prefixer.stop()
    record = format_record({"type": "exit", "rank": rank, "code": code})
    prefixer.write_direct(format_rank_line(rank, record) + "\n")
    return code


def _exit(code: int) -> None:
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


if __name__ == "__main__":
    _exit(main(sys.argv[1:]))
