"""Ranks forked from a ready interpreter: a node's fork server and the rank's side of it.

Every start of a rank by torchrun (the first, and each restart of an elastic or a local job
whose node lives) would start Python anew and import torch again: seconds per rank (about
2.3 s on a 2-core machine, 4 s on an H100 node), the larger part of a recovery. So the agent
starts one fork server per node (the local supervisor one per job: ``python -m
jupyter_ktrain.pod.agent.forks FD``) and gives the node command ``$KTRAIN_FORK_SOCKET``.

The first start is forked from it too, so a node imports torch once, not once in torchrun and
again in each rank: the server imports torch at once, at normal priority, listening meanwhile
under a name of its own (``cold.sock``, the same socket), where whoever asks (torchrun) waits in
its queue: no timer, no import of its own. With torch imported it takes the name ranks connect
to, ``$KTRAIN_FORK_SOCKET`` (a rename), and forks whoever asked. What ranks import beyond torch
(``torch._dynamo``, ``$KTRAIN_WARM_PREIMPORT``: :mod:`.preimport`) it imports in a thread once
the first ranks are forked and no request came for :data:`_QUIET_S` (a request meanwhile waits
for it): the first ranks never wait for it, later ones (restarts) have it for free. A server
that ends before it forks (killed) closes its queue: whoever waited runs in its own process.

torchrun starts each rank as always (``python -m jupyter_ktrain.pod.runtime PROGRAM``); that
process finds the warm server and, instead of importing anything, hands it its standard
streams, environment, folder and arguments: the server forks a child that runs
:func:`..program.main` with them, in a session of its own (as torchrun starts its workers). The
node command (torchrun) forks from it too (:func:`forked_command`, ``python -m
jupyter_ktrain.pod.agent.forks --run torch.distributed.run ARGS``). The process that
asked stays the rank (or the node command) for torchrun, the agent, the supervisor and the
user: it forwards SIGTERM/SIGINT/SIGHUP to the forked child and ends the way the child ended
(its exit code, or killed by the same signal, so ``kill -9`` of either reads as a process killed
by SIGKILL). When it dies first (SIGKILL, its node stopped), the server kills the child's
session at once: nothing of a rank outlives it. A child also dies with the server
(``PR_SET_PDEATHSIG``).

A forked rank carries ``KTRAIN_FORKED=<seconds from the request to the fork>`` in its
environment, which says how the rank started, and ``KTRAIN_LAUNCHER_PID``: the process that
started the rank (torchrun), its parent had it not been forked. Where no server answers (none
started: another launcher; it ended; it did not take the request), the process runs in its
own interpreter as before.

Safe to fork: the server forks only while no thread of its own imports, and never touches
CUDA (each rank initialises CUDA and NCCL itself, after the fork), as in :mod:`.warm`. Standard
library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from .. import program
from .preimport import preimport
from .rendezvous import quicken

__all__ = [
    "FORKED_ENV",
    "FORK_SERVER_ENV",
    "FORK_SOCKET_ENV",
    "LAUNCHER_ENV",
    "ForkServer",
    "Server",
    "forked_command",
    "forks_ranks",
    "is_warm",
    "run_module",
    "run_rank",
    "start_server",
]

FORK_SOCKET_ENV = "KTRAIN_FORK_SOCKET"
# "0" in a job's environment (``--env KTRAIN_FORK_SERVER=0``): no fork server (its memory, about
# 0.4 GB a node with torch, kept; a restarted rank then imports torch again, as plain torchrun's)
FORK_SERVER_ENV = "KTRAIN_FORK_SERVER"
FORKED_ENV = "KTRAIN_FORKED"
LAUNCHER_ENV = "KTRAIN_LAUNCHER_PID"
_STREAMS = (0, 1, 2)
_HEADER = struct.Struct("!I")
_POLL_S = 0.05
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_MODULE = "jupyter_ktrain.pod.agent.forks"
_READY = "forks.sock"  # the socket's name once the server is warm: what ranks connect to
_COLD = "cold.sock"  # its name until then: nothing connects to it
# what the server imports before it forks anything (torchrun and the first ranks): torch alone
_FIRST_IMPORTS = ("torch",)
# the rest (:mod:`.preimport`) comes once the first ranks are forked and no request came for this
_QUIET_S = 0.5


def is_warm(path: str | None) -> bool:
    """Whether the fork server of ``$KTRAIN_FORK_SOCKET`` ``path`` is warm (takes requests)."""
    return bool(path) and os.path.exists(str(path))


def _connect(path: str) -> socket.socket | None:
    """A connection to the node's fork server, under its warm name or, while it still imports,
    its cold one (the same socket: the request waits in its queue); None when none listens."""
    cold = os.path.join(os.path.dirname(path), _COLD)
    for name in (path, cold, path):  # the rename may fall between the first two tries
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(name)
        except OSError:
            sock.close()
            continue
        return sock
    return None


# -- the rank's side ------------------------------------------------------------------------
def run_rank(argv: list[str], run: Callable[[list[str]], int]) -> int:
    """Run a rank forked from the node's fork server (once it has imported what ranks import),
    or ``run(argv)`` here when there is none (turned off, another launcher, or it ended).

    Returns the rank's exit code; a rank killed by a signal kills this process with it."""
    return _through_server(argv, run, None)


def run_module(module: str, argv: list[str]) -> int:
    """``python -m module ARGV`` (the node command: torchrun) forked from the node's fork server
    once it has imported torch, or run here when there is none; its exit code, as
    :func:`run_rank`. Either way it ends without
    interpreter teardown (:func:`..program.exit_now`): a torchrun whose ranks failed is gone
    at once, not a second or two later, and its node starts again that much sooner."""
    return _through_server(argv, lambda args: run_here(module, args), module)


def forked_command(cmd: list[str]) -> list[str]:
    """``python [flags] -m MODULE ARGS`` (torchrun) as asked of the node's fork server."""
    i = cmd.index("-m")
    return [*cmd[:i], "-m", _MODULE, "--run", cmd[i + 1], *cmd[i + 2 :]]


def run_here(module: str, argv: list[str]) -> int:
    """Run ``module`` as ``__main__`` with ``argv`` in this process, as ``python -m`` would;
    its exit code (an exception's traceback on stderr and 1, as the interpreter does)."""
    sys.argv = [module, *argv]
    sys.path.insert(0, os.getcwd())  # as ``python -m`` puts its folder first
    quicken(module)  # torchrun's rendezvous without its one-second polls
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _through_server(argv: list[str], run: Callable[[list[str]], int], module: str | None) -> int:
    """``run(argv)`` forked from the node's server (waiting in its queue while it imports), or
    here when none listens or it closes the connection without forking."""
    os.environ.pop(FORKED_ENV, None)  # its launcher's (a forked torchrun's), not its own
    path = os.environ.get(FORK_SOCKET_ENV)
    sock = _connect(path) if path else None
    if sock is None:  # no server (turned off, another launcher) or it ended: here, as before
        return run(argv)
    env = dict(os.environ)
    if module is None:  # a rank's own children start as any process does
        env.pop(FORK_SOCKET_ENV, None)
    env[LAUNCHER_ENV] = str(os.getppid())  # torchrun: the forked rank's parent is the server
    request = {"argv": argv, "cwd": os.getcwd(), "env": env, "t": time.time(), "module": module}
    reader = sock.makefile("rb")
    try:
        _send(sock, json.dumps(request).encode())
        first = reader.readline()
    except OSError as exc:
        first, why = b"", f"{type(exc).__name__}: {exc}"
    else:
        why = "it closed the connection"
    if not first:  # nothing was forked: it starts here, as without a server
        sock.close()
        sys.stderr.write(
            f"jupyter-ktrain: the node's fork server did not take {module or 'this rank'} "
            f"({why}); it starts in its own process\n"
        )
        return run(argv)
    pid = int(json.loads(first)["pid"])
    for sig in _FORWARDED:
        signal.signal(sig, lambda signum, _f: _kill_group(pid, signum))
    try:
        last = reader.readline()
    except OSError:
        last = b""
    if not last:
        return _lost()
    status = int(json.loads(last)["status"])
    if status < 0:  # killed by a signal: end the same way, so torchrun reads it as such
        if -status != signal.SIGKILL:
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        return 128 - status
    return status


def _send(sock: socket.socket, data: bytes) -> None:
    message = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [message], list(_STREAMS))
    if sent < len(message):
        sock.sendall(message[sent:])


def _lost() -> int:
    sys.stderr.write("jupyter-ktrain: the node's fork server ended before this rank did\n")
    return 128 + signal.SIGKILL


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# -- the server -----------------------------------------------------------------------------
def forks_ranks(argv: Sequence[str]) -> bool:
    """Whether a node command starts its ranks through torchrun (what a fork server serves)."""
    return "torch.distributed.run" in argv


@dataclass
class Server:
    """A running fork server: its process, the folder of its socket and the socket's warm
    name (``$KTRAIN_FORK_SOCKET``)."""

    proc: subprocess.Popen[bytes]
    folder: str
    path: str

    def settled(self) -> bool:
        """Whether it is warm, or will never be (it ended)."""
        return is_warm(self.path) or self.proc.poll() is not None

    def warm(self, timeout: float = 60.0) -> bool:
        """Wait up to ``timeout`` s until it is warm; False when it is not (it ended, or still
        imports)."""
        deadline = time.monotonic() + timeout
        while not self.settled() and time.monotonic() < deadline:
            time.sleep(0.02)
        return is_warm(self.path)

    def stop(self) -> None:
        """End it (its ranks' sessions with it) and remove its socket."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def start_server(
    python: str, env: Mapping[str, str], preexec_fn: Callable[[], None] | None = None
) -> Server:
    """Start a fork server listening on a socket of its own (it warms at once);
    raises ``OSError`` (also where ``$KTRAIN_FORK_SERVER`` is ``0``: turned off)."""
    if env.get(FORK_SERVER_ENV, "").strip() == "0":
        raise OSError(f"{FORK_SERVER_ENV}=0 turns it off")
    folder = tempfile.mkdtemp(prefix="ktrain-forks-")  # short: a socket path has 108 bytes
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(os.path.join(folder, _COLD))
        listener.listen(128)
        proc = subprocess.Popen(
            [python, "-u", "-m", _MODULE, str(listener.fileno())],
            env={k: v for k, v in env.items() if k != FORK_SOCKET_ENV},
            pass_fds=(listener.fileno(),),
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec_fn,
        )
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        listener.close()  # only the server holds it: once it ends, a rank connects to nothing
    return Server(proc, folder, os.path.join(folder, _READY))


class ForkServer:
    """The server's loop: a request forks a rank; a rank's end is told to its requester; a
    requester's end kills its rank's session."""

    def __init__(self, listener: socket.socket, run: Callable[[list[str]], int]):
        self.listener = listener
        self.run = run
        self.ranks: dict[int, socket.socket | None] = {}  # pid -> its requester's connection
        self.stopping: list[int] = []
        self.rest_due: float | None = None  # when to import the rest (set by the first rank)
        self.rest: threading.Thread | None = None  # the thread that imports it
        self.held: list[tuple[socket.socket, dict[str, Any], list[int]]] = []  # asked meanwhile

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping.append(signum)

    def warm_up(self) -> bool:
        """Import torch, then take the warm name (whoever waits in the queue is served next);
        False when stopped meanwhile (whoever waits then runs in its own process)."""
        preimport(os.environ, only=_FIRST_IMPORTS)
        if self.stopping:
            return False
        cold = self.listener.getsockname()
        os.rename(cold, os.path.join(os.path.dirname(cold), _READY))
        return True

    def _import_the_rest(self) -> None:
        """The rest (see the module docstring), in a thread, so the loop still ends at once the
        rank of a requester that dies meanwhile; a request meanwhile is held until it ends."""
        if self.rest_due is not None and time.monotonic() >= self.rest_due:
            self.rest_due = None
            self.rest = threading.Thread(
                target=preimport, args=(os.environ,), name="ktrain-preimport", daemon=True
            )
            self.rest.start()
        if self.held and not self._importing():
            held, self.held = self.held, []
            for asked in held:
                self._start(*asked)

    def _importing(self) -> bool:
        return self.rest is not None and self.rest.is_alive()

    def serve(self) -> int:
        while not self.stopping:
            self._import_the_rest()
            conns = {c.fileno(): (pid, c) for pid, c in self.ranks.items() if c is not None}
            listening = self.listener.fileno()
            with contextlib.suppress(InterruptedError):
                ready, _, _ = select.select([listening, *conns], [], [], _POLL_S)
                for fd in ready:
                    if fd == listening:
                        self._accept()
                    else:
                        self._requester_gone(*conns[fd])  # a requester only ever closes
            self._reap()
        for pid in list(self.ranks):
            _kill_group(pid, signal.SIGKILL)
        return 0

    def _accept(self) -> None:
        asked = self._receive()
        if asked is not None and self._importing():
            self.held.append(asked)
        elif asked is not None:
            self._start(*asked)

    def _receive(self) -> tuple[socket.socket, dict[str, Any], list[int]] | None:
        """The next request in the queue: its connection, request and streams; None when it was
        none (closed at once, or broken: its rank then starts in its own process)."""
        conn, _ = self.listener.accept()
        try:
            request, fds = _receive(conn)
        except EOFError:  # connected and closed at once: nothing to start
            conn.close()
            return None
        except (OSError, ValueError) as exc:  # its rank starts in its own process (run_rank)
            sys.stderr.write(f"jupyter-ktrain fork server: a request failed ({exc!r})\n")
            conn.close()
            return None
        return conn, request, fds

    def _start(self, conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        """Fork what ``request`` asks, unless its requester ended while it waited in the queue
        (a requester only ever closes: readable means gone)."""
        try:
            if select.select([conn], [], [], 0)[0]:
                conn.close()
                return
            pid = self._fork(request, fds, conn)
        finally:
            for fd in fds:
                os.close(fd)
        if not request.get("module") and self.rest is None:  # a rank: the rest after a lull
            self.rest_due = time.monotonic() + _QUIET_S
        self.ranks[pid] = conn
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")

    def _fork(self, request: dict[str, Any], fds: list[int], conn: socket.socket) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the child: never returns into the server's loop
            os.setsid()
            program.die_with_parent()  # a rank never outlives its node's server
            for sig in _FORWARDED:
                signal.signal(sig, signal.SIG_DFL)
            self.listener.close()
            for other in self.ranks.values():
                if other is not None:
                    other.close()
            conn.close()
            for fd, target in zip(fds, _STREAMS, strict=True):
                os.dup2(fd, target)
            os.environ.clear()
            os.environ.update(request["env"])
            os.environ[FORKED_ENV] = f"{time.time() - float(request['t']):.3f}"
            _threads_as_asked(os.environ)
            os.chdir(request["cwd"])
            module = request.get("module")
            if module:  # a node command (torchrun), run as ``python -m`` runs it
                program.exit_now(run_here(str(module), list(request["argv"])))
            code = self.run(list(request["argv"]))
        finally:
            os._exit(code)

    def _requester_gone(self, pid: int, conn: socket.socket) -> None:
        """The process torchrun started ended first (killed): its rank goes with it."""
        _kill_group(pid, signal.SIGKILL)
        conn.close()
        self.ranks[pid] = None

    def _reap(self) -> None:
        for pid in list(self.ranks):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got, status = pid, 0
            if not got:
                continue
            conn = self.ranks.pop(pid)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            _kill_group(pid, signal.SIGKILL)  # whatever the rank started and left behind
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"status": code}).encode() + b"\n")
                conn.close()


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    conn.settimeout(10.0)  # a requester sends everything at once
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, len(_STREAMS))
    if not data and not fds:
        raise EOFError("a connection, not a request")
    if len(fds) != len(_STREAMS):
        for fd in fds:
            os.close(fd)
        raise ValueError("a request without its three streams")
    while len(data) < _HEADER.size:
        data += conn.recv(1 << 16) or _eof(fds)
    (size,) = _HEADER.unpack_from(data)
    while len(data) < _HEADER.size + size:
        data += conn.recv(1 << 16) or _eof(fds)
    conn.settimeout(None)
    return json.loads(data[_HEADER.size : _HEADER.size + size]), fds


def _eof(fds: list[int]) -> bytes:
    for fd in fds:
        os.close(fd)
    raise ValueError("the request ended early")


def _threads_as_asked(env: Mapping[str, str]) -> None:
    """OpenMP read ``OMP_NUM_THREADS`` when the server imported torch, from the server's
    environment; the rank's own (torchrun sets 1 for several ranks a node) is set here."""
    torch = sys.modules.get("torch")
    raw = env.get("OMP_NUM_THREADS", "").strip()
    if torch is not None and raw.isdigit() and int(raw) > 0:
        torch.set_num_threads(int(raw))


def main(argv: list[str]) -> int:
    """``python -m jupyter_ktrain.pod.agent.forks FD``: warm, then serve on the listening
    socket ``FD``; ``... forks --run MODULE ARGS``: run ``python -m MODULE ARGS`` forked from
    the node's server (:func:`run_module`)."""
    if argv[:1] == ["--run"]:
        program.exit_now(run_module(argv[1], argv[2:]))
    listener = socket.socket(fileno=int(argv[0]))
    server = ForkServer(listener, _run_program)
    for sig in _FORWARDED:
        signal.signal(sig, server.on_signal)
    return server.serve() if server.warm_up() else 0


def _run_program(argv: list[str]) -> int:
    program.exit_now(program.main(argv))
    return 1  # not reached: exit_now leaves the process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
