"""Hangs and stragglers named on the test cluster. A hang: a 2-node PyTorchJob through ``%%ktrain
--hang-after 4s`` (gloo over the pods' network), rank 1 asleep before an all-reduce while rank 0
waits inside it. The cell names rank 1 and its pod, with the stack taken in its pod
(``pods/exec``, as ``%ktrain stacks``); the side panel's API says the same, with the stacks
(:mod:`tests.integration.hang_checks`). A straggler: rank 3 of 2x2 computes 3x longer a step;
the cell and the panel name it with its pod and plot each rank's step time."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.config import load_config
from jupyter_ktrain.server.core import PanelCore
from tests.notebook_cells import HANG_CELL, STRAGGLER_CELL

from .hang_checks import hang_named_in_cell_and_panel, straggler_named_in_cell_and_panel
from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow

NAME = "hang"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("KTRAIN_MONITOR", "text")
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def test_a_rank_asleep_before_an_all_reduce_is_named_with_its_pod_and_stack(k8s_shell, capsys):
    assert k8s_shell.run_cell(HANG_CELL, store_history=True).success
    hang_named_in_cell_and_panel(
        k8s_shell,
        capsys,
        flags="--nodes 2 --procs-per-node 1 --image local/python",
        name=NAME,
        panel=PanelCore({"kubernetes": lambda: KubernetesBackend(load_config())}),
        cancel=lambda: KubernetesBackend(load_config()).cancel(NAME),
        where=(f"pod {NAME}-master-0", f"pod {NAME}-worker-0"),
        backend="kubernetes",
    )


def test_a_rank_slowed_by_a_busy_loop_is_named_the_straggler_with_its_pod(k8s_shell, capsys):
    assert k8s_shell.run_cell(STRAGGLER_CELL, store_history=True).success
    straggler_named_in_cell_and_panel(
        k8s_shell,
        capsys,
        flags="--nodes 2 --procs-per-node 2 --image local/python",
        name="straggler",
        panel=PanelCore({"kubernetes": lambda: KubernetesBackend(load_config())}),
        where="pod straggler-worker-0",
    )
