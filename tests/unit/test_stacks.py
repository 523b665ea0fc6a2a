"""A rank's stacks (:mod:`jupyter_ktrain.pod.stacks`) in this process: a thread answers on the
rank's socket while the main thread waits; a program's lines are named by their notebook cell;
a rank that ended is left out and one that does not answer says so; and the text the command
shows (:func:`jupyter_ktrain.rank_stacks.stacks_text`)."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_ktrain.pod.protocol import Stack
from jupyter_ktrain.pod.stacks import STACKS_DIR_ENV, ask, main, serve, stacks_dir, take
from jupyter_ktrain.rank_stacks import stacks_text

PROGRAM = """\
import threading


def wait_here(event):
    event.wait()
_KTRAIN_LINES = ((4, 2, 3, 7),)
"""


@pytest.fixture
def folder() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="stk-") as d:  # short: a socket path has 108 bytes
        yield d


def _waiting_thread(program: Path) -> tuple[threading.Thread, threading.Event]:
    """A thread of this process inside the program's ``wait_here`` (notebook cell [3])."""
    namespace: dict[str, Any] = {}
    exec(compile(program.read_text(), str(program), "exec"), namespace)
    event = threading.Event()
    thread = threading.Thread(target=namespace["wait_here"], args=(event,), name="loader")
    thread.start()
    return thread, event


def test_a_thread_in_the_program_is_shown_in_its_cell(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    thread, event = _waiting_thread(program)
    try:
        stack = take(2, str(program))
    finally:
        event.set()
        thread.join()
    assert (stack.rank, stack.why) == (2, "")
    names = [name for name, _ in stack.threads]
    assert names[0] == "MainThread"  # always first
    frames = dict(stack.threads)["loader"]
    assert frames[0] == ("cell [3]", 8, "wait_here", "event.wait()")  # program line 5
    assert all("threading.py" not in f[0] for f in frames[:1])  # a thread's start left out


def test_a_rank_answers_while_it_waits_and_not_after_it_ended(folder: str) -> None:
    server = serve(3, "/nowhere/program.py", {STACKS_DIR_ENV: folder})
    assert server is not None
    got = ask(folder)
    assert [s.rank for s in got] == [3]
    assert got[0].why == ""
    main_frames = dict(got[0].threads)["MainThread"]
    assert any(
        f[2] == "test_a_rank_answers_while_it_waits_and_not_after_it_ended" for f in main_frames
    )
    assert ask(folder, ranks={4}) == []
    server.close()
    assert ask(folder) == []


def test_a_rank_that_ended_without_a_word_is_left_out(folder: str) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(Path(folder) / "rank5.sock"))
    dead.close()  # its socket file stays, nobody listens: a rank killed by SIGKILL
    assert ask(folder) == []


def test_a_rank_that_does_not_answer_says_so(folder: str) -> None:
    deaf = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deaf.bind(str(Path(folder) / "rank6.sock"))
    deaf.listen(1)  # connections queue; nobody accepts (a process that holds the GIL)
    try:
        got = ask(folder, timeout=0.3)
    finally:
        deaf.close()
    assert got == [Stack(6, why=got[0].why)]
    assert got[0].why.startswith("no answer within 0 s")


def test_no_folder_no_server_and_the_default_folder() -> None:
    assert serve(0, "/nowhere/program.py", {}) is None  # a program run by hand
    assert stacks_dir({STACKS_DIR_ENV: "/x"}) == "/x"
    assert stacks_dir({}).endswith("ktrain-stacks")


def test_the_node_command_prints_one_record_line_a_rank(
    folder: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = serve(1, "/nowhere/program.py", {STACKS_DIR_ENV: folder})
    assert server is not None
    monkeypatch.setenv(STACKS_DIR_ENV, folder)
    try:
        assert main(["--rank", "1"]) == 0
        assert main(["--rank", "x"]) == 2
    finally:
        server.close()
    out = capsys.readouterr()
    assert out.out.startswith('[rank1]: @@ktrain {"type":"stack","rank":1,')
    assert len(out.out.splitlines()) == 1
    assert "usage: python -m jupyter_ktrain.pod.stacks [--rank R]" in out.err


def test_the_text_reads_as_a_traceback() -> None:
    frames = (
        ("cell [1]", 1, "<module>", "stall(1)"),
        ("cell [1]", 4, "wait_here", "time.sleep(s)"),
    )
    text = stacks_text(
        "job",
        [
            ("job-master-0", Stack(0, 10, (("MainThread", frames), ("io", ())))),
            ("job-worker-0", Stack(1, why="no answer within 5 s")),
            ("job-worker-1", Stack(None, why="could not be asked (pod gone)")),
        ],
    )
    assert text.splitlines() == [
        "Stacks of 'job', 2 ranks (most recent call last):",
        "",
        "rank 0 (pod job-master-0), pid 10:",
        "  Thread 'MainThread':",
        '    File "cell [1]", line 1, in <module>',
        "      stall(1)",
        '    File "cell [1]", line 4, in wait_here',
        "      time.sleep(s)",
        "  Thread 'io':",
        "    (in jupyter-ktrain's own code)",
        "",
        "rank 1 (pod job-worker-0): no answer within 5 s",
        "",
        "pod job-worker-1: could not be asked (pod gone)",
    ]
