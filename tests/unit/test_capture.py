"""Capture round trips: cells run in a real IPython shell, the %%ktrain body is captured, the
program runs in a separate Python process, and its result must equal the kernel's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain import CaptureError, SecretError
from jupyter_ktrain.capture import CapturedProgram, capture


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    yield sh
    sh.reset(new_session=True)


def run_cells(sh: InteractiveShell, cells: list[str]) -> None:
    for cell in cells:
        result = sh.run_cell(cell, store_history=True)
        assert result.success, (cell, result.error_in_exec)


def capture_from(sh: InteractiveShell, body: str) -> CapturedProgram:
    return capture(body, sh.user_ns, sh.user_ns["In"], sh.user_ns_hidden)


def test_requirements_pinned_and_stdlib_left_out(shell: InteractiveShell) -> None:
    run_cells(shell, ["import numpy as np\nimport json", "def f():\n    return np.ones(1), json"])
    program = capture_from(shell, "f()")
    import numpy

    assert program.requirements == (f"numpy=={numpy.__version__}",)
    assert program.files["requirements.txt"] == f"numpy=={numpy.__version__}\n".encode()


def test_a_secret_in_a_local_module_is_refused(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    token = "sk-" + "Ab1" * 10  # built here: no token-shaped literal in this file
    (src / "mylocalsettings.py").write_text(f"API = {token!r}\n")
    monkeypatch.syspath_prepend(str(src))
    run_cells(shell, ["import mylocalsettings", "def f():\n    return mylocalsettings.API"])
    with pytest.raises(SecretError) as info:
        capture_from(shell, "result = f()")
    message = str(info.value)
    assert "'mylocalsettings.py' (a local module next to the notebook)" in message
    assert "--secret-env OPENAI_API_KEY=openai-api-key/key" in message
    assert token not in message


def test_only_what_is_needed_travels(shell: InteractiveShell) -> None:
    run_cells(shell, ["BIG = list(range(10))\nUNUSED = 'x'", "def f():\n    return BIG[0]"])
    source = capture_from(shell, "f()").source
    assert "BIG = [0, 1," in source
    assert "UNUSED" not in source


BAD: dict[str, tuple[list[str], str, list[str]]] = {
    "open_file": (
        ["fh = open(__file__ if '__file__' in dir() else '/dev/null')"],
        "fh.read()",
        ["'fh'", "cell [1]", "inside the function"],
    ),
    "socket": (
        ["import socket\nconn = socket.socket()"],
        "conn.close()",
        ["'conn'", "socket", "cannot be serialised"],
    ),
    "lock": (
        ["import threading\nLOCK = threading.Lock()", "def f():\n    return LOCK"],
        "f()",
        ["'LOCK'", "cell [1]"],
    ),
    "generator": (["gen = (i for i in range(3))"], "list(gen)", ["'gen'", "generator"]),
    "closure_made_in_a_loop": (  # no single statement rebuilds it
        [
            "def make(k):\n    def inner():\n        return k\n    return inner",
            "for k in (7,):\n    step = make(k)",
        ],
        "step()",
        ["'step'", "closure", "cell [2]"],
    ),
    "secret_default": (
        ["def login(db_password='pw-9x8y7z'):\n    return db_password"],
        "login()",
        ["default of db_password (line 1) in 'login' (cell [1])", "--secret-env DB_PASSWORD="],
    ),
    "undefined": ([], "train(1)", ["'train'", "not defined"]),
    "syntax": ([], "train(", ["not valid Python", "line 1"]),
    "cuda_tensor": (
        [
            "Tensor = type('Tensor', (), {'is_cuda': True, '__module__': 'torch'})",
            "weights = Tensor()",
        ],
        "weights",
        ["'weights'", "CUDA", ".cpu()"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_what_cannot_travel_gets_one_clear_error(case: str, shell: InteractiveShell) -> None:
    cells, body, fragments = BAD[case]
    run_cells(shell, cells)
    try:
        with pytest.raises(CaptureError) as info:
            capture_from(shell, body)
    finally:  # close what the case opened
        shell.run_cell("for _n in ('fh', 'conn'):\n    globals().get(_n) and globals()[_n].close()")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message


# -- a value over the limit is refused before it is copied ------------------------------------

BIG = 200 * 2**20


class Expands:
    """Small in memory, big once pickled: only the pickler's own count can tell."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (bytes, (bytes(17 * 2**20),))


def test_a_pickle_that_passes_the_limit_is_stopped_there() -> None:
    from jupyter_ktrain.capture.encode import MAX_VALUE_BYTES, EncodeFailure, encode_value

    with pytest.raises(EncodeFailure, match="its pickle passes the 16 MiB limit"):
        encode_value([Expands()], lambda obj: None)
    small = encode_value([bytes(MAX_VALUE_BYTES - 2**20)], lambda obj: None)
    assert small.size > MAX_VALUE_BYTES - 2**20  # just under the limit still travels
