"""Hangs and stragglers named on the test cluster. A hang: a 2-node PyTorchJob through ``%%ktrain
--hang-after 4s`` (gloo over the pods' network), rank 1 asleep before an all-reduce while rank 0
waits inside it. The cell names rank 1 and its pod, with the stack taken in its pod
(``pods/exec``, as ``%ktrain stacks``); the side panel's API says the same, with the stacks
(:mod:`tests.integration.hang_checks`). The same before the first all-reduce (no step ever
reported), followed and detached: then ``%ktrain status`` and the panel say it with no kernel
following the job. A straggler: rank 3 of 2x2 computes 3x longer a step;
the cell and the panel name it with its pod and plot each rank's step time."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.config import load_config
from jupyter_ktrain.server.core import PanelCore
from tests.notebook_cells import HANG_CELL, STRAGGLER_CELL

from .hang_checks import (
    first_collective_hang_named,
    hang_named_in_cell_and_panel,
    straggler_named_in_cell_and_panel,
)
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


def test_a_rank_that_never_reaches_the_first_all_reduce_is_named_followed_and_detached(
    k8s_shell, capsys
):
    """Before any step, followed by the cell and then detached: with no kernel following it,
    ``%ktrain status`` and the side panel name rank 1 and where it waits, from the lines the
    pods stored (the kubelet's times) and the stacks taken in its pod."""
    assert k8s_shell.run_cell(HANG_CELL, store_history=True).success
    name = "first-hang"

    def backend() -> KubernetesBackend:
        return KubernetesBackend(load_config())

    first_collective_hang_named(
        k8s_shell,
        capsys,
        flags="--nodes 2 --procs-per-node 1 --image local/python",
        name=name,
        panel=PanelCore({"kubernetes": backend}),
        cancel=lambda job: backend().cancel(job),
        ended=lambda job: backend().status(job).terminal,
        where=(f"pod {name}-master-0", f"pod {name}-worker-0"),
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
