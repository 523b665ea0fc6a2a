"""Every thread's Python stack of a running rank, on demand (``ktrain stacks``).

Each rank (:func:`.program.main`) answers on a Unix socket of its node,
``$KTRAIN_STACKS_DIR/rank{N}.sock`` (the node's agent sets the folder: :func:`stacks_dir`),
from a daemon thread that waits in ``accept()``: one connection, one :class:`~.protocol.Stack`
record, every thread's frames from ``sys._current_frames()`` with a frame of the notebook's code
named as the job's tracebacks name it (``cell [4]``, line 31; :mod:`.tracebacks`). A thread
answers where a signal handler could not: while the main thread waits in a collective, a
``sleep`` or I/O (anything that lets go of the GIL). No debugger, no signal, no privilege.

The asker is on the node: :func:`ask` connects to the ranks' sockets at once and reads each
answer (a rank that does not answer in :data:`ASK_TIMEOUT_S` is a record saying so; a socket
whose rank ended answers nothing and is left out). ``python -m jupyter_ktrain.pod.stacks
[--rank R]`` prints the records, one line each, in the protocol's form: what a cluster backend
runs in each pod through ``pods/exec`` (no API, no token in the pod); the local backend asks
the sockets itself. Standard library only.

The same socket answers ``ktrain profile`` (:mod:`.profiler`): the asker's first line is the
request, ``stack`` or ``profile N``; a profile is answered from a thread of its own (it waits
for the rank's next N steps) with one :class:`~.protocol.Profile` record, and the node asks it
with ``python -m jupyter_ktrain.pod.stacks --profile N [--rank R]`` (:func:`ask_profile`).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .profiling import profiler
from .protocol import Profile, Stack, format_rank_line, parse_line
from .tracebacks import notebook_frames

__all__ = [
    "ASK_TIMEOUT_S",
    "PROFILE_TIMEOUT_S",
    "STACKS_DIR_ENV",
    "StackServer",
    "ask",
    "ask_profile",
    "serve",
    "stacks_dir",
    "stacks_text",
    "take",
]

STACKS_DIR_ENV = "KTRAIN_STACKS_DIR"
ASK_TIMEOUT_S = 5.0
# a profile's answer: the wait for a first step, the steps, exporting and packing the trace
PROFILE_TIMEOUT_S = profiler.NO_STEP_WAIT_S + profiler.STEPS_TIMEOUT_S + 60.0
_SOCKET_RE = re.compile(r"^rank(\d+)\.sock$")
_THREADING = threading.__file__


def stacks_dir(env: Mapping[str, str]) -> str:
    """The node's folder of rank sockets: ``$KTRAIN_STACKS_DIR``, else one fixed folder in the
    temporary directory (a pod runs one node, and a command exec'd into it finds it there)."""
    return env.get(STACKS_DIR_ENV) or os.path.join(tempfile.gettempdir(), "ktrain-stacks")


def _socket_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.sock")


# -- the rank's side --------------------------------------------------------------------------
def take(rank: int | None, program: str, skip: Collection[int] = ()) -> Stack:
    """This process's stack, every thread but ``skip`` (thread idents) and those running only
    the product's own code (the runtime's output pumps), without the frames that start a
    thread; the main thread first, always."""
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    threads = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda i: i[0] != main):
        if ident in skip:
            continue
        frames = [
            f
            for f in notebook_frames(traceback.extract_stack(frame), program)
            if f.filename != _THREADING  # a thread's start, the same in every thread
        ]
        if not frames and ident != main:
            continue
        named = names.get(ident, f"thread {ident}")
        shown = tuple((f.filename, f.lineno or 0, f.name, (f.line or "").strip()) for f in frames)
        threads.append((named, shown))
    return Stack(rank, os.getpid(), tuple(threads), t=time.time())


@dataclass
class StackServer:
    """A rank's answering thread and its socket (:func:`serve`)."""

    path: str
    sock: socket.socket

    def close(self) -> None:
        """Stop answering: the socket goes (an asker then leaves this rank out)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            self.sock.close()


def serve(rank: int, program: str, env: Mapping[str, str]) -> StackServer | None:
    """Answer stack requests for ``rank`` from now on, on a thread; None where the node gives
    no folder (a program run by hand) or the socket cannot be made (then one line says so)."""
    if not env.get(STACKS_DIR_ENV):
        return None
    folder = stacks_dir(env)
    path = _socket_path(folder, rank)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)  # the user's alone: stacks show code
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # an earlier run's or restart's: this rank answers now
        sock.bind(path)
        sock.listen(16)
    except OSError as exc:
        sock.close()
        print(f"jupyter-ktrain: `stacks` off for rank {rank} ({exc})", file=sys.stderr)
        return None
    thread = threading.Thread(
        target=_answer, args=(sock, rank, program), name="ktrain-stacks", daemon=True
    )
    thread.start()
    return StackServer(path, sock)


def _answer(sock: socket.socket, rank: int, program: str) -> None:
    me = threading.get_ident()
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:  # closed: the rank is ending
            return
        try:
            conn.settimeout(ASK_TIMEOUT_S)
            request = _request(conn)
            if request[:1] == ["profile"] and len(request) == 2 and request[1].isdigit():
                threading.Thread(
                    target=_answer_profile, args=(conn, rank, int(request[1])),
                    name="ktrain-profile", daemon=True,
                ).start()  # fmt: skip
                continue
            with conn:
                conn.sendall(take(rank, program, skip={me}).format().encode() + b"\n")
        except Exception:  # an asker that went away; the next one is answered
            with contextlib.suppress(OSError):
                conn.close()
            continue


def _request(conn: socket.socket) -> list[str]:
    """The asker's first line, split (``stack``, ``profile N``)."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 256:
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    return data.decode("ascii", "replace").split()


def _answer_profile(conn: socket.socket, rank: int, steps: int) -> None:
    with conn:
        record = profiler.take(rank, steps)
        with contextlib.suppress(OSError):
            conn.settimeout(ASK_TIMEOUT_S)
            conn.sendall(record.format().encode() + b"\n")


# -- the asker's side -------------------------------------------------------------------------
def ask(
    folder: str, ranks: Collection[int] | None = None, timeout: float = ASK_TIMEOUT_S
) -> list[Stack]:
    """The stack of every rank with a socket in ``folder`` (or of ``ranks`` only), by rank: a
    rank that ended is left out; one that gave nothing in ``timeout`` is a record saying so."""
    got = _ask_all(folder, ranks, "stack", timeout)
    return [
        r if isinstance(r, Stack) else Stack(rank, why=_silent(why, timeout))
        for rank, r, why in got
    ]


def ask_profile(
    folder: str,
    steps: int,
    ranks: Collection[int] | None = None,
    timeout: float = PROFILE_TIMEOUT_S,
) -> list[Profile]:
    """The profile of the next ``steps`` steps of every rank with a socket in ``folder`` (of
    ``ranks`` only), by rank, as :func:`ask` asks for stacks."""
    got = _ask_all(folder, ranks, f"profile {steps}", timeout)
    return [r if isinstance(r, Profile) else Profile(rank, why=_no_profile(r, why, timeout))
            for rank, r, why in got]  # fmt: skip


def _no_profile(answer: object, why: str, timeout: float) -> str:
    if isinstance(answer, Stack):  # a rank of an older jupyter-ktrain answers every ask so
        return "its jupyter-ktrain is older: it shows its stack but takes no profile"
    return why or f"no answer within {timeout:.0f} s"


def _silent(why: str, timeout: float) -> str:
    return why or f"no answer within {timeout:.0f} s (its process holds the GIL?)"


def _ask_all(
    folder: str, ranks: Collection[int] | None, request: str, timeout: float
) -> list[tuple[int, object, str]]:
    """(rank, the record it answered or None, why not) of each rank asked, by rank."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = sorted(int(m.group(1)) for m in map(_SOCKET_RE.match, names) if m)
    wanted = [r for r in found if ranks is None or r in ranks]
    if not wanted:
        return []
    with ThreadPoolExecutor(max_workers=min(len(wanted), 64)) as pool:
        got = pool.map(lambda r: _ask_one(_socket_path(folder, r), r, request, timeout), wanted)
        return [answer for answer in got if answer is not None]


def _ask_one(path: str, rank: int, request: str, timeout: float) -> tuple[int, object, str] | None:
    deadline = time.monotonic() + timeout
    data = b""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return None  # its rank ended (or a newer run's rank took the name meanwhile)
        except OSError as exc:
            return rank, None, f"its socket could not be reached ({exc})"
        # a rank of an older jupyter-ktrain reads no request: it sends its stack and closes at
        # once, and the write may then fail (its end is closed) with the answer already here
        with contextlib.suppress(OSError):
            sock.sendall(request.encode() + b"\n")
        try:
            while not data.endswith(b"\n") and time.monotonic() < deadline:
                sock.settimeout(max(deadline - time.monotonic(), 0.01))
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
    return rank, parse_line(data.decode("utf-8", "replace").strip()).typed, ""


def main(argv: list[str]) -> int:
    """``python -m jupyter_ktrain.pod.stacks [--rank R] [--profile N]``: this node's ranks'
    stacks (or profiles of their next N steps), one ``[rankN]: @@ktrain {...}`` line each."""
    options = dict(zip(argv[::2], argv[1::2], strict=False))
    if (
        len(argv) % 2
        or set(options) - {"--rank", "--profile"}
        or not all(v.isdigit() for v in options.values())
    ):
        sys.stderr.write("usage: python -m jupyter_ktrain.pod.stacks [--rank R] [--profile N]\n")
        return 2
    ranks = {int(options["--rank"])} if "--rank" in options else None
    folder = stacks_dir(os.environ)
    if "--profile" in options:
        records: list[Stack | Profile] = [*ask_profile(folder, int(options["--profile"]), ranks)]
    else:
        records = [*ask(folder, ranks)]
    for record in records:
        sys.stdout.write(format_rank_line(record.rank or 0, record.format()) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def stacks_text(name: str, got: Sequence[tuple[str, Stack]]) -> str:
    """Each rank's stack as Python shows a traceback: every thread, most recent call last."""
    ranks = sum(1 for _, stack in got if stack.rank is not None)
    plural = "s" if ranks != 1 else ""
    lines = [f"Stacks of {name!r}, {ranks} rank{plural} (most recent call last):"]
    for where, stack in got:
        pod = f"pod {where}" if where else "a node"
        head = pod if stack.rank is None else f"rank {stack.rank}" + (f" ({pod})" if where else "")
        if stack.why:
            lines += ["", f"{head}: {stack.why}"]
            continue
        lines += ["", f"{head}, pid {stack.pid}:"]
        for thread, frames in stack.threads:
            lines.append(f"  Thread {thread!r}:")
            for file, line, function, code in frames:
                lines.append(f'    File "{file}", line {line}, in {function}')
                if code:
                    lines.append(f"      {code}")
            if not frames:
                lines.append("    (in jupyter-ktrain's own code)")
    return "\n".join(lines)
