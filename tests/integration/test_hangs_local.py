"""Hangs and stragglers named, on real local jobs. A hang: 2 nodes x 1 rank on gloo, each reporting
a step after every all-reduce; at step 5 rank 1 sleeps before the all-reduce, so rank 0 waits
inside it and neither makes progress. With ``--hang-after 4s`` the cell names rank 1 (not rank
0, which only waits), says where it waits (its stack, taken once automatically: ``sleep <-
steps_then_hang (cell [N], line 12)``), and the side panel's job tab says the same, with the
stacks; both forget it once the job ends. Before any step: rank 1 sleeps before the first
all-reduce (``--hang-after 8s``): named with where it waits, followed by the cell and detached
(``%ktrain status`` and the panel, from the supervisor's own watch). A straggler: rank 3 of
2x2 computes 0.3 s a step in a busy loop, the others 0.1 s; the cell and the panel name rank 3
and plot each rank's step time.
Bad ``--hang-after`` is one line, before anything starts."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.server.core import PanelCore
from tests.notebook_cells import HANG_CELL, STRAGGLER_CELL, extension_shell

from .hang_checks import (
    first_collective_hang_named,
    hang_named_in_cell_and_panel,
    straggler_named_in_cell_and_panel,
)

pytestmark = pytest.mark.slow

NAME = "hang-local"


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    sh = extension_shell(HANG_CELL + STRAGGLER_CELL)
    yield next(sh)
    for status in LocalBackend().list_jobs():
        LocalBackend().delete(status.name)
    next(sh, None)


def test_a_rank_asleep_before_an_all_reduce_is_named_with_its_stack_in_cell_and_panel(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    hang_named_in_cell_and_panel(
        shell,
        capsys,
        flags="--nodes 2 --procs-per-node 1",
        name=NAME,
        panel=PanelCore({"local": LocalBackend}),
        cancel=lambda: LocalBackend().cancel(NAME),
        where=("node 0", "node 1"),
        backend="local",
    )
    logs = "\n".join(line for _, line in LocalBackend().read_logs(NAME))
    assert re.search(r'"step": ?4\b', logs)  # every rank reported step 4; none step 5
    assert not re.search(r'"step": ?5\b', logs)


def test_a_rank_that_never_reaches_the_first_all_reduce_is_named_followed_and_detached(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    first_collective_hang_named(
        shell,
        capsys,
        flags="--nodes 2 --procs-per-node 1",
        name="first-hang",
        panel=PanelCore({"local": LocalBackend}),
        cancel=LocalBackend().cancel,
        ended=lambda name: LocalBackend().status(name).terminal,
        where=("node 0", "node 1"),
        backend="local",
    )


def test_a_rank_slowed_by_a_busy_loop_is_named_the_straggler_and_each_ranks_step_time_plotted(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    straggler_named_in_cell_and_panel(
        shell,
        capsys,
        flags="--nodes 2 --procs-per-node 2",
        name="straggler-local",
        panel=PanelCore({"local": LocalBackend}),
        where="node 1",
    )


def test_a_bad_hang_after_is_one_line_before_anything_starts(shell: InteractiveShell) -> None:
    for bad, says in (
        ("soon", "--hang-after 'soon' is not a duration: use e.g. 90s, 15m, 2h."),
        ("0s", "--hang-after '0s' must be longer than 0: use e.g. 30s or 5m."),
    ):
        with pytest.raises(UsageError) as err:
            shell.run_cell_magic(
                "ktrain", f"--hang-after {bad} --name bad-hang", "steps_then_hang(5, 1)\n"
            )
        assert str(err.value) == f"ktrain: {says}"
    assert LocalBackend().list_jobs() == []
