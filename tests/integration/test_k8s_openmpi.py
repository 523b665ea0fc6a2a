"""An MPIJob's ranks run in its worker pods, one host per node, with Open MPI 4 and with Open
MPI 5, on the real Kubeflow v1 MPI controller: it gives the launcher its hostfile and rsh agent
(``kubexec.sh``) under Open MPI 4's names only; Open MPI 5 reads neither and would start every
rank on the launcher, and the job would still succeed. Every rank prints its pod's host name and
which Open MPI started it; the test counts distinct host names."""

from __future__ import annotations

import re
import shutil

import pytest

pytest.importorskip("kubernetes")

from ..cluster.image_shims import OPENMPI5_BIN
from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow

WHERE = """
import os, socket
version = os.environ.get("OMPI_VERSION") or ("4" if "OMPI_MCA_orte_hnp_uri" in os.environ else "?")
rank = os.environ["OMPI_COMM_WORLD_RANK"]
print(f"rank {rank} ran on host {socket.gethostname()} under Open MPI {version}", flush=True)
"""
_LINE = re.compile(r"rank (\d+) ran on host (\S+) under Open MPI (\S+)")


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


@pytest.mark.parametrize(
    ("image", "major"),
    [
        pytest.param(
            "local/python",
            "4",
            marks=pytest.mark.skipif(
                shutil.which("mpirun") is None, reason="Open MPI 4 missing (make system)"
            ),
            id="openmpi4",
        ),
        pytest.param(
            "local/openmpi5",
            "5",
            marks=pytest.mark.skipif(
                not (OPENMPI5_BIN / "mpirun").exists(), reason="Open MPI 5 missing (make setup)"
            ),
            id="openmpi5",
        ),
    ],
)
def test_every_rank_runs_in_its_own_worker_pod(k8s_shell, capsys, image, major):
    name = f"ompi{major}"
    job = k8s_shell.run_cell_magic(
        "ktrain",
        f"--kind MPIJob --nodes 2 --procs-per-node 2 --image {image} --name {name}",
        WHERE,
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    seen = {int(rank): (host, version) for rank, host, version in _LINE.findall(out)}
    assert sorted(seen) == [0, 1, 2, 3], out
    assert {v.split(".")[0] for _, v in seen.values()} == {major}, seen
    hosts = {host for host, _ in seen.values()}
    # as many hosts as nodes, each a worker pod: none on the launcher
    assert hosts == {f"{name}-worker-0", f"{name}-worker-1"}, seen
    # -map-by slot: ranks 0-1 on the first worker, 2-3 on the second
    assert seen[0][0] == seen[1][0] != seen[2][0] == seen[3][0], seen
