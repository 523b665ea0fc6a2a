"""Capture of real notebook code in a real kernel (nbclient), as issue 10 found it: a model and
its optimizer from an earlier cell (the optimizer must train *that* model), two names for one
list, a namespace package next to the notebook, ``lru_cache``/``cache``/``torch.no_grad()``
helpers, ``exit()`` in a script, a lambda in a config dict, a closure, a LambdaLR scheduler;
and a failing job whose traceback points at the notebook cell, not at the product."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

CELLS = [
    "%load_ext jupyter_ktrain",
    # [2] a namespace package (no __init__.py) next to the notebook, like minGPT-ddp's mingpt/
    "import functools, json, warnings\nimport torch\nfrom ktrain_nspkg import model as nsmodel",
    # [3] one model, its optimizer and scheduler; two names for one list
    "model = torch.nn.Linear(2, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda e: 0.5 ** e)\n"
    "A = [1]\nB = A",
    # [4] wrapped helpers
    "@functools.lru_cache(maxsize=None)\ndef feature(n):\n    return n * 2\n\n"
    "@functools.cache\ndef twice(n):\n    return 2 * n\n\n"
    "@torch.no_grad()\ndef weight_sum(m):\n    return float(m.weight.sum())",
    # [5] a lambda inside a container, a closure
    "CONFIG = {'decay': lambda epoch: 0.5 ** epoch, 'epochs': 2}\n"
    "def make(k):\n    def scale(x):\n        return k * x\n    return scale\n"
    "scale = make(7)",
    # [6]
    "def train():\n"
    "    before = model.weight.detach().clone()\n"
    "    model(torch.ones(4, 2)).sum().backward()\n"
    "    optimizer.step()\n"
    "    scheduler.step()\n"
    "    B.append(2)\n"
    "    if CONFIG['epochs'] < 0:\n"
    "        exit(1)\n"
    "    return {\n"
    "        'trained': not torch.equal(before, model.weight),\n"
    "        'shared': A == [1, 2],\n"
    "        'helpers': [feature(4), twice(5),\n"
    "                    weight_sum(model) == float(model.weight.detach().sum())],\n"
    "        'namespace_package': nsmodel.NAME,\n"
    "        'lambda': CONFIG['decay'](1),\n"
    "        'closure': scale(3),\n"
    "        'lr': scheduler.get_last_lr(),\n"
    "    }",
    # [7]
    "%%ktrain --name capture-points\nresult = train()",
    # [8]
    "print('RESULT ' + json.dumps(result))",
    # [9] a failure deep in notebook code
    "def load(batch):\n    rows = batch['rows']\n    return rows\n\n"
    "def crash():\n    warnings.warn('batch is small')\n    value = 1\n"
    "    return load({'size': value})",
    # [10]
    "%%ktrain --name crash-points\ncrash()",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    from nbclient import NotebookClient

    work = tmp_path_factory.mktemp("capture-notebook")
    package = work / "ktrain_nspkg"
    package.mkdir()
    (package / "model.py").write_text("NAME = 'from a namespace package'\n")
    home = work / "ktrain-home"
    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KTRAIN_HOME", str(home))
        mp.setenv("KTRAIN_MONITOR", "text")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        client = NotebookClient(
            nb,
            timeout=240,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": str(work)}},
        )
        client.execute()
    return nb, home


def _text(cell: Any) -> str:
    parts = [o.get("text", "") for o in cell.get("outputs", [])]
    parts += ["\n".join(o.get("traceback", [])) for o in cell.get("outputs", [])]
    return "".join(parts)


def _result(nb: Any) -> dict[str, Any]:
    text = _text(nb.cells[7])
    assert "RESULT {" in text, _text(nb.cells[6])
    return json.loads(text.split("RESULT ", 1)[1].splitlines()[0])  # type: ignore[no-any-return]


def test_optimizer_trains_the_model_it_was_built_for_and_shared_names_stay_shared(
    executed: tuple[Any, Path],
) -> None:
    result = _result(executed[0])
    assert result["trained"] is True, result
    assert result["shared"] is True, result
    assert result["lr"] == [0.05]  # the scheduler drives the same optimizer


def test_namespace_package_next_to_the_notebook_travels(executed: tuple[Any, Path]) -> None:
    nb, home = executed
    assert _result(nb)["namespace_package"] == "from a namespace package"
    assert (home / "jobs" / "capture-points" / "code" / "ktrain_nspkg" / "model.py").exists()


def test_lru_cache_cache_and_no_grad_helpers_travel(executed: tuple[Any, Path]) -> None:
    assert _result(executed[0])["helpers"] == [8, 10, True]


def test_no_false_warning_for_exit_and_no_torch_warning(executed: tuple[Any, Path]) -> None:
    text = _text(executed[0].cells[6])
    assert "Set from rank 0: result" in text  # the job ran: nothing stopped it before
    assert "warning" not in text.lower(), text
    assert "TypedStorage" not in text


def test_lambda_in_a_dict_and_a_closure_travel_by_their_statement(
    executed: tuple[Any, Path],
) -> None:
    result = _result(executed[0])
    assert result["lambda"] == 0.5
    assert result["closure"] == 21


def test_traceback_points_at_the_notebook_cell_without_product_frames(
    executed: tuple[Any, Path],
) -> None:
    nb, home = executed
    log = (home / "jobs" / "crash-points" / "rank-0.log").read_text()
    tb = log[log.index("Traceback (most recent call last):") :]
    assert 'File "cell [10]", line 1, in <module>\n    crash()' in tb
    assert "File \"cell [9]\", line 8, in crash\n    return load({'size': value})" in tb
    assert "File \"cell [9]\", line 2, in load\n    rows = batch['rows']" in tb
    assert tb.rstrip().endswith("KeyError: 'rows'")
    for product in ("jupyter_ktrain", "runpy", "program.py"):
        assert product not in tb, tb
    # a warning from notebook code names its cell and line too
    assert "cell [9]:6: UserWarning: batch is small" in log
    # the cell shows the failing rank's last lines: the same notebook frames
    assert 'File "cell [9]", line 2, in load' in _text(nb.cells[9])
