"""Ranks started by mpirun (MPIJob): the env:// variables from Open MPI's, rank 0's address as
the launcher finds it, and one agent per rank that samples GPUs once per pod.

The tests of tests/unit/test_mpi.py that start processes (a unit test starts none)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from jupyter_ktrain.pod import mpi
from jupyter_ktrain.pod.agent import runner
from tests.unit.test_mpi import ompi
from tests.unit.test_sampler import FakeNvml


def test_kubectl_lookup_reads_pods_from_kubectl_json(tmp_path: Path) -> None:
    """Both shapes kubectl prints: a List for several names, the Pod itself for one."""
    pod = {
        "metadata": {"name": "job-worker-0"},
        "status": {"phase": "Running", "podIP": "10.0.0.7"},
    }
    for doc in ({"kind": "List", "items": [pod]}, pod):
        fake = tmp_path / "kubectl"
        fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(doc)}\nEOF\n")
        fake.chmod(0o755)
        lookup = mpi.kubectl_lookup(str(fake))
        assert lookup is not None
        assert lookup(["job-worker-0"]) == {"job-worker-0": ("Running", "10.0.0.7")}
    assert mpi.kubectl_lookup(str(tmp_path / "absent")) is None
    fake.write_text("#!/bin/sh\necho 'Error from server (Forbidden)' >&2\nexit 1\n")
    failing = mpi.kubectl_lookup(str(fake))
    assert failing is not None
    assert failing(["job-worker-0"]) is None


@pytest.mark.parametrize(("rank", "local", "samples_node"), [(2, 0, 1), (3, 1, None)])
def test_only_local_rank_0_samples_the_gpus_with_its_node_index(
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    rank: int,
    local: int,
    samples_node: int | None,
) -> None:
    for key, value in ompi(rank, 4, local, 2).items():
        monkeypatch.setenv(key, value)
    argv = ["--interval", "0.05", "--", sys.executable, "-c", "import time; time.sleep(0.4)"]
    assert runner.main(argv, nvml=FakeNvml()) == 0
    gpu = [json.loads(line.split("@@ktrain ", 1)[1]) for line in capfd.readouterr().out.splitlines()
           if '"type": "gpu"' in line or '"type":"gpu"' in line]  # fmt: skip
    if samples_node is None:
        assert gpu == []
    else:
        assert gpu
        assert {g["node"] for g in gpu} == {samples_node}
