"""Capture round trips: cells run in a real IPython shell, the %%ktrain body is captured, the
program runs in a separate Python process, and its result must equal the kernel's.

The tests of tests/unit/test_capture.py that start processes (a unit test starts none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.results import results_from_lines
from jupyter_ktrain.capture import CapturedProgram, capture
from tests.unit.test_capture import BIG, capture_from, run_cells

TRICKY = "cost $HOME `id` $(whoami) \\\\n \\' \" 'q' ünïcødé ✓\nEOF\nEOM\n\\"

CASES: dict[str, tuple[list[str], str]] = {
    "helpers_constants_other_cells": (
        [
            "SCALE = 3\nOFFSET = 0.5",
            "def helper(x):\n    return x * SCALE + OFFSET",
            "def train(n):\n    return [helper(i) for i in range(n)]",
        ],
        "result = train(4)",
    ),
    "import_aliases": (
        [
            "import numpy as np\nfrom math import sqrt as root\nimport os.path\n"
            "from collections import Counter",
            "def train():\n    c = Counter('abca')\n"
            "    return float(np.arange(4).sum()), root(16), os.path.join('a', 'b'), c['a']",
        ],
        "result = train()",
    ),
    "classes_bases_decorators": (
        [
            "REGISTRY = {}\ndef register(cls):\n    REGISTRY[cls.__name__] = cls\n    return cls",
            "class Base:\n    factor = 2\n    def scale(self, x):\n        return x * self.factor",
            "@register\nclass Model(Base):\n    factor = Base.factor + 1\n"
            "    @staticmethod\n    def name():\n        return 'model'\n"
            "    @property\n    def double(self):\n        return self.scale(2)",
            "def train():\n    m = Model()\n    return m.scale(5), Model.name(), m.double, sorted(REGISTRY)",
        ],
        "result = train()",
    ),
    "dataclass_and_instance_constant": (
        [
            "from dataclasses import dataclass, field",
            "@dataclass\nclass Config:\n    lr: float = 1e-3\n    layers: list = field(default_factory=list)",
            "CFG = Config(lr=0.25, layers=[4, 8])",
            "def train(cfg):\n    return cfg.lr * sum(cfg.layers), type(cfg).__name__",
        ],
        "result = train(CFG)",
    ),
    "latest_definition_wins": (
        [
            "def helper():\n    return 'old'",
            "K = 1",
            "class C:\n    v = 'old'",
            "def train():\n    return helper(), K, C.v",
            "def helper():\n    return 'new'",
            "K = 2",
            "class C:\n    v = 'new'",
        ],
        "result = train()",
    ),
    "shell_and_heredoc_hostile_text": (
        [
            f"TEXT = {TRICKY!r}",
            "def train(arg):\n    doc = '''line\nEOF\n$HOME `x` \\\\ done'''\n"
            "    return TEXT, arg, doc, len(arg)",
        ],
        f"result = train({TRICKY!r} + '$PATH')",
    ),
    "lambdas_and_partials": (
        [
            "import functools",
            "square = lambda v: v * v",
            "def power(base, exp):\n    return base ** exp",
            "cube = functools.partial(power, exp=3)",
            "def train():\n    return square(3), cube(2)",
        ],
        "result = train()",
    ),
    "recursion_and_defaults": (
        [
            "LIMIT = 10",
            "def even(n):\n    return n == 0 or odd(n - 1)",
            "def odd(n):\n    return n != 0 and even(n - 1)",
            "def fact(n, limit=LIMIT):\n    return 1 if n <= 1 else min(n, limit) * fact(n - 1)",
            "def train():\n    inner = lambda x: x + 1\n    return even(4), odd(4), fact(5), inner(1)",
        ],
        "result = train()",
    ),
    "wrapped_decorator": (
        [
            "import functools\nCALLS = []",
            "def traced(fn):\n    @functools.wraps(fn)\n    def wrapper(*a):\n"
            "        CALLS.append(fn.__name__)\n        return fn(*a)\n    return wrapper",
            "@traced\ndef step(x):\n    return x + 1",
            "def train():\n    v = step(step(1))\n    return v, CALLS, step.__name__",
        ],
        "result = train()",
    ),
    "closures_and_lambdas_in_containers_by_statement": (
        [
            "def make(k):\n    def scale(x):\n        return k * x\n    return scale",
            "scale = make(7)\nCONFIG = {'decay': lambda e: 0.5 ** e, 'k': 2}",
            "def train():\n    return scale(3), CONFIG['decay'](CONFIG['k'])",
        ],
        "result = train()",
    ),
    "shared_objects_stay_shared": (
        [
            "import collections\nA = [1]\nB = A\nD = collections.OrderedDict(a=A)",
            "def train():\n    B.append(2)\n    return A, D['a'] is A, A is B",
        ],
        "result = train()",
    ),
    "tuple_assignment_and_shared_statement": (
        [
            "VOCAB, DIM, HEADS = 100, 32, 4\nA = B = 'same'",
            "def train():\n    return VOCAB * DIM // HEADS, A, B",
        ],
        "result = train()",
    ),
    "loops_with_and_try_in_the_cell": (
        ["N = 3", "def f(v):\n    return v * 2"],
        "result = []\nfor i in range(N):\n    result.append(f(i))\nwith open('/dev/null') as fh:\n    size = len(fh.read())\ntry:\n    1 / 0\nexcept ZeroDivisionError as err:\n    msg = type(err).__name__\nresult.append((size, msg))",
    ),
    "trailing_expression_and_unicode_names": (
        ["größe = 3", "def zähle(n):\n    return n * größe"],
        "zähle(2) + 1",
    ),
}


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    yield sh
    sh.reset(new_session=True)


def run_program(program: CapturedProgram, tmp_path: Path) -> dict[str, Any]:
    for rel, data in program.files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    env = {**os.environ, "RANK": "0"}
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_ktrain.pod.runtime", str(tmp_path / "program.py")],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    results = results_from_lines(out.splitlines())
    assert results is not None, out
    return results


@pytest.mark.parametrize("case", sorted(CASES))
def test_job_computes_what_the_kernel_computes(
    case: str, shell: InteractiveShell, tmp_path: Path
) -> None:
    cells, body = CASES[case]
    run_cells(shell, cells)
    program = capture_from(shell, body)
    remote = run_program(program, tmp_path)
    local = shell.run_cell(body, store_history=True)
    expected = shell.user_ns["result"] if "result" in remote else local.result
    got = remote.get("result", remote.get("_"))
    assert got == expected
    # the program is plain source: no value of ours went through a shell or heredoc
    assert "<<" not in program.source


def test_tricky_text_arrives_byte_identical(shell: InteractiveShell, tmp_path: Path) -> None:
    cells, body = CASES["shell_and_heredoc_hostile_text"]
    run_cells(shell, cells)
    remote = run_program(capture_from(shell, body), tmp_path)["result"]
    assert remote[0].encode() == TRICKY.encode()
    assert remote[1] == TRICKY + "$PATH"


def test_local_module_travels_with_the_program(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "mylocalhelpers.py").write_text("def triple(x):\n    return 3 * x\n")
    monkeypatch.syspath_prepend(str(src))
    run_cells(shell, ["import mylocalhelpers as mh", "def f():\n    return mh.triple(7)"])
    program = capture_from(shell, "result = f()")
    assert "mylocalhelpers.py" in program.files
    out = tmp_path / "job"
    out.mkdir()
    assert run_program(program, out)["result"] == 21


def test_a_chained_failure_names_notebook_cells_in_every_part(
    shell: InteractiveShell, tmp_path: Path
) -> None:
    run_cells(
        shell,
        [
            "import json",
            "def parse(text):\n    return json.loads(text)\n\n"
            "def load(text):\n    try:\n        return parse(text)\n"
            "    except ValueError as exc:\n        raise RuntimeError('bad config') from exc",
        ],
    )
    program = capture(
        "load('{')", shell.user_ns, shell.user_ns["In"], shell.user_ns_hidden, cell_number=3
    )
    (tmp_path / "program.py").write_text(program.source)
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter_ktrain.pod.runtime", str(tmp_path / "program.py")],
        capture_output=True,
        text=True,
        env={**os.environ, "RANK": "0"},
        timeout=120,
        check=False,
    )
    err = "\n".join(line.removeprefix("[rank0]: ") for line in proc.stderr.splitlines())
    assert proc.returncode == 1
    cause, _, effect = err.partition("The above exception was the direct cause")
    assert 'File "cell [2]", line 6, in load\n    return parse(text)' in cause
    assert 'File "cell [2]", line 2, in parse\n    return json.loads(text)' in cause
    assert "json/decoder.py" in cause  # library frames stay: they are not ours
    assert "File \"cell [3]\", line 1, in <module>\n    load('{')" in effect
    assert "line 8, in load\n    raise RuntimeError('bad config') from exc" in effect
    assert effect.rstrip().endswith("RuntimeError: bad config")
    for ours in ("jupyter_ktrain", "runpy", "program.py"):
        assert ours not in err, err


# -- a value over the limit is refused before it is copied ------------------------------------

PEAK_PROBE = """
import json, resource, sys
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

sh = InteractiveShell.instance()
sh.extension_manager.load_extension("jupyter_ktrain")

def magic(body):
    try:
        sh.run_cell_magic("ktrain", "--dry-run", body)
    except UsageError as exc:
        return str(exc)
    return ""

assert sh.run_cell("SMALL = [1]\\ndef warm():\\n    return SMALL", store_history=True).success
magic("warm()")  # the magic's own imports come before the measurement
assert sh.run_cell(sys.argv[1] + "\\ndef train():\\n    return len(BIG)", store_history=True).success
before = peak()
message = magic("result = train()")
print(json.dumps({"growth": peak() - before, "message": message}))
"""


@pytest.mark.parametrize(
    "make",
    [
        f"BIG = bytes({BIG})",
        f"BIG = bytearray({BIG})",
        f"import numpy\nBIG = numpy.ones({BIG // 8})",
    ],
)
def test_a_200_mb_global_is_refused_without_copying_it(make: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_PROBE, make],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert "'BIG'" in got["message"]
    assert (
        "cannot be sent to the job: it is at least 200.0 MiB, over the 16 MiB limit"
        in (got["message"])
    )
    assert "load or build the data inside the function" in got["message"]
    assert got["growth"] < BIG / 4, got  # pickling it first grew the peak by 400-800 MB
