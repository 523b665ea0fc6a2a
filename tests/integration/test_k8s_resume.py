"""Resume on the real Training Operator: a Master+Worker PyTorchJob with ``--checkpoints`` on a
PersistentVolumeClaim whose worker rank is killed with SIGKILL (exit 137) after step 7. The
ExitCode policy restarts it, the ranks resume from the step-5 checkpoint on the claim, and the
final model equals, bit for bit, an uninterrupted run's (the local backend's, same seed)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("kubernetes")

from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.config import load_config

from ..resume_cells import SETUP
from .k8s_helpers import checkpoint_claim, configured_shell

pytestmark = pytest.mark.slow

# one thread per rank on both backends: the same float operations in the same order
FLAGS = "--nodes 2 --procs-per-node 1 --env OMP_NUM_THREADS=1"


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(SETUP, store_history=True).success
        yield sh


def test_a_killed_worker_is_restarted_and_resumes_from_the_checkpoint_on_the_claim(
    k8s_shell, test_cluster, tmp_path, capsys
):
    claim = checkpoint_claim(test_cluster, tmp_path)
    marks = str(tmp_path)  # the pods' processes run on this machine
    cell = f"w, first = train(12, 3, 7, {marks!r})\n"
    job = k8s_shell.run_cell_magic(
        "ktrain", f"{FLAGS} --image local/python --checkpoints {claim}:/checkpoints --name ft", cell
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "ft-worker-0 restarted after exit 137, killed by signal 9 (SIGKILL)" in out, out
    assert "resumed from step 5 (checkpoint step-5.pt)" in out, out
    if "first" not in k8s_shell.user_ns:  # seen once in a full run: say what the logs held
        stored = list(KubernetesBackend(load_config()).read_logs("ft"))
        pods = sorted({pod for pod, _ in stored})
        tail = [f"{pod}: {line[:160]}" for pod, line in stored[-12:]]
        pytest.fail(f"no result bound; pods {pods}, {len(stored)} lines, last:\n"
                    + "\n".join(tail) + f"\ncell said:\n{out[-3000:]}")  # fmt: skip
    assert k8s_shell.user_ns["first"] == 6  # the run that finished began after the checkpoint
    resumed = k8s_shell.user_ns["w"]
    # the same job, never interrupted, on the local backend
    k8s_shell.run_cell_magic("ktrain", f"{FLAGS} --backend local --name whole", "w, _ = train()\n")
    assert LocalBackend().status("whole").state == "Succeeded"
    whole = k8s_shell.user_ns["w"]
    assert all(torch.equal(a, b) for a, b in zip(resumed, whole, strict=True))
