"""Every image reference and registry value is checked for OCI syntax where it is parsed:
``--image`` in a cell, ``%ktrain config registry=/base_image=``, ``ktrain render --image``.
One line each, naming the option and the fix; nothing is rendered or stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.config import config_path, load_config
from jupyter_ktrain.frontends.cli_render import render_main

BAD_IMAGES = ["UPPER/Case:tag with space", "nvcr.io//pytorch::", "host:99999999/a", "a@sha256:12"]


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("jupyter_ktrain")
    return sh


@pytest.mark.parametrize("image", BAD_IMAGES)
def test_bad_image_in_a_cell_is_one_line_and_nothing_renders(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], image: str
) -> None:
    result = shell.run_cell(f"%%ktrain --backend kubernetes --image '{image}' --dry-run\nx = 1\n")
    err = capsys.readouterr()
    assert isinstance(result.error_in_exec, UsageError)
    [line] = err.err.strip().splitlines()
    assert f"--image {image!r} is not an image reference" in line
    assert "Fix --image IMAGE (e.g. nvcr.io/nvidia/pytorch:24.03-py3)" in line
    assert "apiVersion" not in err.out


@pytest.mark.parametrize(("key", "value"), [("registry", "::not-a-registry"),
                                            ("base_image", "Team/Base:1 2"),
                                            ("registry", "reg istry.example.com/x")])  # fmt: skip
def test_bad_registry_values_are_refused_and_not_stored(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    result = shell.run_cell(f"%ktrain config {key}='{value}'")
    err = capsys.readouterr().err
    assert isinstance(result.error_in_exec, UsageError)
    [line] = err.strip().splitlines()
    assert f"{key} {value!r} is not an image reference" in line
    assert f"Fix `%ktrain config {key}=...`" in line
    assert not config_path().exists()
    assert getattr(load_config(), key) is None


def test_good_values_are_kept(shell: InteractiveShell) -> None:
    shell.run_line_magic("ktrain", "config registry=127.0.0.1:5000/team/ktrain")
    shell.run_line_magic("ktrain", "config base_image=nvcr.io/nvidia/pytorch:24.03-py3")
    assert load_config().registry == "127.0.0.1:5000/team/ktrain"
    assert load_config().base_image == "nvcr.io/nvidia/pytorch:24.03-py3"


def test_render_refuses_a_bad_image_and_asks_for_everything_missing_at_once(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert render_main(["--name", "x", "--image", "nvcr.io//pytorch::"]) == 2
    assert "--image 'nvcr.io//pytorch::' is not an image reference" in capsys.readouterr().err
    assert render_main(["--nodes", "4", "--gpus-per-node", "8", "--rdma", "roce"]) == 2
    err = capsys.readouterr().err
    assert "needs --name NAME and --image IMAGE" in err
