"""``ktrain.run``/``ktrain.submit`` take the cell's flags as keywords and go through the same
runner as ``%%ktrain``: the same options object, the same checks and errors, the same plan and
the same MLflow params for the same options. Dry runs only: nothing starts here (the jobs run
in tests/integration/test_python_api.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import jupyter_ktrain as ktrain
from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.runner.options import RunOptions, keyword_argv
from jupyter_ktrain.runner.source import call_source
from jupyter_ktrain.tracking.params import job_params
from tests.notebook_cells import extension_shell

LINE = (
    "--backend kubernetes --name same --nodes 4 --gpus-per-node 8 --image img:1 --rdma roce "
    "--deepspeed zero3 --bf16 --micro-batch 2 --grad-accum 8 --dataset data:/data:ro "
    "--shm 64Gi --secret-env HF_TOKEN=hf-token/token --label team=nlp --label tier=a "
    "--env A=1 --elastic 2:8 --dry-run"
)
KEYWORDS = {
    "backend": "kubernetes",
    "name": "same",
    "nodes": 4,
    "gpus_per_node": 8,
    "image": "img:1",
    "rdma": "roce",
    "deepspeed": "zero3",
    "bf16": True,
    "micro_batch": 2,
    "grad_accum": 8,
    "dataset": "data:/data:ro",
    "shm": "64Gi",
    "secret_env": "HF_TOKEN=hf-token/token",
    "label": {"team": "nlp", "tier": "a"},
    "env": {"A": "1"},
    "elastic": "2:8",
    "dry_run": True,
}


def test_keywords_are_the_cells_flags() -> None:
    assert RunOptions.from_keywords(**KEYWORDS) == RunOptions.from_line(LINE)
    assert keyword_argv({"warm": True, "fp16": False, "nodes": None, "env": {"T": None}}) == [
        "--warm",
        "--env",
        "T",
    ]


@pytest.mark.parametrize(
    ("keywords", "line"),
    [
        ({"elastic": "x"}, "--elastic x"),
        ({"nodes": "two"}, "--nodes two"),
        ({"bf16": True, "fp16": True}, "--bf16 --fp16"),
        ({"kind": "JaxJob"}, "--kind JaxJob"),
        ({"micro_batch": 2}, "--micro-batch 2"),
    ],
)
def test_same_checks_and_same_errors(keywords: dict[str, object], line: str) -> None:
    def error(make: Callable[[], RunOptions]) -> str:
        with pytest.raises(SpecError) as exc:
            make().spec("train")
        return str(exc.value)

    assert error(lambda: RunOptions.from_keywords(**keywords)) == error(
        lambda: RunOptions.from_line(line)
    )


def test_an_unknown_option_names_the_nearest_one_and_where_arguments_go() -> None:
    with pytest.raises(SpecError) as exc:
        ktrain.run(print, node=2)
    message = str(exc.value)
    assert "unknown option node=" in message
    assert "Did you mean nodes=?" in message
    assert "args=(...) and kwargs=" in message
    with pytest.raises(SpecError, match="warm= is a switch"):
        RunOptions.from_keywords(warm="yes")


def train(model: str, epochs: int) -> int:
    return epochs


class Settings:
    depth = 3


def test_a_call_is_written_as_a_cell_with_its_arguments() -> None:
    source = call_source(train, ("m",), {"epochs": 3})
    assert source.cell == "train('m', epochs=3)\n"
    assert source.namespace["train"] is train
    settings = Settings()
    source = call_source(train, (settings,), {"epochs": [1, 2]})
    assert source.cell == "train(_ktrain_arg0, epochs=[1, 2])\n"
    assert source.namespace["_ktrain_arg0"] is settings
    with pytest.raises(SpecError, match="takes the function to run first"):
        call_source(3)  # type: ignore[arg-type]


def test_the_same_options_make_the_same_plan_and_the_same_mlflow_params(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kubernetes dry run needs no cluster; the objects and params of both are equal."""
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    shells = extension_shell("def train(model, epochs):\n    return epochs\n")
    sh = next(shells)
    cell = sh.run_cell_magic("ktrain", LINE, 'train(model="llama", epochs=3)\n')
    from_python = ktrain.run(
        sh.user_ns["train"], kwargs={"model": "llama", "epochs": 3}, **KEYWORDS
    )
    next(shells, None)  # reset
    out = capsys.readouterr().out
    assert cell.dry_run, out
    assert from_python.dry_run, out
    a, b = cell.plan, from_python.plan
    assert a is not None
    assert b is not None
    assert a.spec == b.spec
    # the code itself differs (the cell's text), and with it its hash: nothing else
    assert _without_code(a.request.objects) == _without_code(b.request.objects)
    assert "train(model='llama', epochs=3)" in b.program.source
    assert job_params(a.spec, RunOptions.from_line(LINE).values, a.program.source) == job_params(
        b.spec, RunOptions.from_keywords(**KEYWORDS).values, b.program.source
    )


def _without_code(objects: object) -> object:
    """The objects without the code's ConfigMap and the code hash (``ktrain.io/cell``)."""
    import json

    text = json.dumps([o for o in objects if o["kind"] != "ConfigMap"])  # type: ignore[attr-defined]
    data = json.loads(text)
    for obj in data:
        for meta in _metadata(obj):
            meta.get("labels", {}).pop("ktrain.io/cell", None)
    return data


def _metadata(node: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "metadata" and isinstance(value, dict):
                found.append(value)
            found += _metadata(value)
    elif isinstance(node, list):
        for value in node:
            found += _metadata(value)
    return found
