"""``%%ktrain --help`` alone in a cell prints the flags, as the README says (IPython refuses a
cell magic whose body is empty before the magic runs); ``%ktrain --help`` lists the commands
and points at it. A cell with flags but no code says what is missing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    yield sh
    sh.reset(new_session=True)


@pytest.mark.parametrize("cell", ["%%ktrain --help", "%%ktrain -h\n", "%%ktrain --help\n\n  \n"])
def test_cell_help_alone_prints_the_flags(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], cell: str
) -> None:
    result = shell.run_cell(cell)
    captured = capsys.readouterr()
    assert result.success, captured
    assert "usage: %%ktrain" in captured.out
    assert "--procs-per-node" in captured.out
    assert "cell body is empty" not in captured.out + captured.err


def test_run_cell_magic_with_the_body_a_cell_gives_prints_the_help(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell.transform_cell("%%ktrain --help") == (
        "get_ipython().run_cell_magic('ktrain', '--help', '\\n')\n"
    )
    assert shell.run_cell_magic("ktrain", "--help", "\n") is None
    assert "usage: %%ktrain" in capsys.readouterr().out


def test_flags_without_code_say_what_is_missing(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str], ktrain_home: object
) -> None:
    result = shell.run_cell("%%ktrain --nodes 2")
    err = capsys.readouterr().err
    assert isinstance(result.error_in_exec, UsageError)
    assert "has no code under its %%ktrain line" in err
    assert "cell body is empty" not in err


def test_line_help_lists_commands_and_points_at_the_cell_help(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell.run_cell("%ktrain --help").success
    out = capsys.readouterr().out
    assert "%ktrain list" in out
    assert "%%ktrain --help" in out


def test_other_cells_are_left_alone(shell: InteractiveShell) -> None:
    assert shell.transform_cell("%%ktrain --nodes 2\ntrain()") == (
        "get_ipython().run_cell_magic('ktrain', '--nodes 2', 'train()\\n')\n"
    )
    assert (
        shell.transform_cell("%%ktrainer\n") == "get_ipython().run_cell_magic('ktrainer', '', '')\n"
    )
