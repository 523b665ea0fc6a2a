"""Recovery from a worker's death, on the test cluster, against a cold resubmit by hand measured
in the same run; and checkpoint save throughput against a plain ``torch.save``.

1. Seconds from a worker's death to the first training step after resume. The job is the
   tests' deterministic training cell (``tests/resume_cells.py``: 2 nodes x 1 rank, a
   checkpoint every 3 steps on a PersistentVolumeClaim); its last rank kills itself with
   SIGKILL after step 7 (as the OOM killer does). The death is the kill mark's time, the resume
   the ``resume`` record of ``ktrain.checkpoint().load()``, the first step after it the first
   ``ktrain.report`` record after that (all wall-clock times of this machine, where the pods'
   processes run).

   - ours, Master+Worker (what ``%%ktrain --nodes 2`` renders): the ExitCode policy makes the
     failed pods anew, the ranks resume from the checkpoint on the claim;
   - ours, ``--elastic 2:2``: torchrun restarts the ranks inside the pods, which rendezvous
     again and resume;
   - the peer: the same job with ``--max-restarts 0`` fails; a user who resubmits the same job
     (same cell, same claim) the moment the monitor says Failed, and whose code loads the last
     checkpoint itself: the death to Failed shown, plus the resubmit to its first step. No
     time for a person to notice is counted: the peer's best case.

   Each three times, in turn; medians.

2. Checkpoints off the training path: ``ktrain.checkpoint().save`` returns once the state is
   staged in CPU memory and writes it in the background (temporary file, fsync, rename, folder
   fsync, prune). Measured against a plain ``torch.save(state, path)`` into the same folder, a
   256 MB state dict, saves interleaved in turn with the page cache written back before each
   (``sync``), medians: the time training is blocked per checkpoint (ours: until ``save``
   returns) against a synchronous ``torch.save``; and the write's throughput (ours: until
   ``wait`` returns) against ``torch.save`` + ``fsync``, what durability costs by itself.
   ``--saves-only`` measures this part alone (no cluster).

The last line is one JSON object with each figure and its goal.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_ktrain.backends.base import Job
from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.capture import capture
from jupyter_ktrain.config import Config
from jupyter_ktrain.monitor.follow import follow
from jupyter_ktrain.options import parse_flags, spec_from_args
from tests.cluster.cluster import Cluster
from tests.resume_cells import SETUP

FLAGS = "--backend kubernetes --nodes 2 --procs-per-node 1 --image local/python"
SAVE_MB = 256
SAVE_ROUNDS = 6
REPEATS = 3  # recovery runs of each kind; medians
TRIES = 3  # a run disturbed by another test cluster on this machine is tried again


class Records:
    """A follow sink that keeps every rank's structured records and when the job failed."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.failed_at: float | None = None
        self.text: list[str] = []  # what to show when a run goes wrong

    def lines(self, replica: str, lines: list[Any]) -> None:
        self.records += [line.record for line in lines if line.record is not None]
        self.text += [f"{replica}: {line.text}" for line in lines if line.record is None]

    def status(self, status: Any) -> None:
        if status.state == "Failed" and self.failed_at is None:
            self.failed_at = time.time()


def _program(cell: str) -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    assert sh.run_cell(SETUP, store_history=True).success
    return capture(cell, sh.user_ns, sh.user_ns["In"], sh.user_ns_hidden)


def _run(backend: KubernetesBackend, name: str, flags: str, cell: str) -> tuple[str, Records]:
    spec = spec_from_args(parse_flags(f"{FLAGS} {flags}"), name).evolve(name=name)
    backend.submit(spec, _program(cell))
    sink = Records()
    status = follow(Job(name, backend), sink)
    return status.state, sink


def _claim(cluster: Cluster, ns: str, name: str) -> None:
    body = {
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    cluster.admin.create(f"/api/v1/namespaces/{ns}/persistentvolumeclaims", body)


def _first_step_after_resume(records: list[dict[str, Any]]) -> tuple[float, float]:
    """(the resume record's time, the first report after it)."""
    resumes = [r["t"] for r in records if r.get("type") == "resume"]
    steps = [r["t"] for r in records if r.get("type") == "metric" and resumes]
    after = [t for t in steps if t >= min(resumes)] if resumes else []
    if not after:
        kinds = sorted({str(r.get("type")) for r in records})
        raise Disturbed(f"no step after a resume: {len(resumes)} resume(s), records {kinds}")
    return min(resumes), min(after)


def recovery(cluster: Cluster, tmp: Path, ns: str, how: str) -> dict[str, float]:
    """One run: ``how`` is "master-worker", "elastic" or "resubmit"."""
    cluster.create_namespace(ns)
    kubeconfig = cluster.user_kubeconfig(tmp / f"{ns}.kubeconfig", ns)
    backend = KubernetesBackend(
        Config(kubeconfig=str(kubeconfig), namespace=ns), say=lambda t: None
    )
    _claim(cluster, ns, "ckpt")
    marks = tmp / ns
    marks.mkdir()
    cell = f"w, first = train(12, 3, 7, {str(marks)!r})\n"
    flags = "--env OMP_NUM_THREADS=1 --checkpoints ckpt:/checkpoints"
    extra = {"master-worker": "", "elastic": "--elastic 2:2", "resubmit": "--max-restarts 0"}
    try:
        state, sink = _run(backend, "first", f"{flags} {extra[how]}", cell)
        _expect(how, state, "Failed" if how == "resubmit" else "Succeeded", sink)
        if not (marks / "killed").exists():
            raise Disturbed(f"{how}: no rank was killed\n" + "\n".join(sink.text[-40:]))
        death = (marks / "killed").stat().st_mtime
        out: dict[str, float] = {}
        if how == "resubmit":
            assert sink.failed_at is not None
            out["failed_seen_s"] = sink.failed_at - death
            # here every pod shares this machine's ports: the new master can listen on its
            # port only once the failed job's pods are gone (on a cluster each pod has its own
            # address). That wait is not counted: the peer's clock starts again at its submit.
            _wait_pods_gone(cluster, ns, "first")
            submitted = time.time()
            state, sink = _run(backend, "again", flags, cell)  # by hand, the moment it failed
            _expect(how, state, "Succeeded", sink)
            death = submitted - out["failed_seen_s"]
        resumed, first_step = _first_step_after_resume(sink.records)
        out["resumed_s"] = resumed - death
        out["first_step_s"] = first_step - death
        return out
    finally:
        cluster.delete_namespace(ns)


def _wait_pods_gone(cluster: Cluster, ns: str, job: str, timeout: float = 120) -> None:
    path = f"/api/v1/namespaces/{ns}/pods"
    selector = f"training.kubeflow.org/job-name={job}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = cluster.admin.get(path, labelSelector=selector)["items"]
        if all(p.get("status", {}).get("phase") in ("Succeeded", "Failed") for p in pods):
            return
        time.sleep(0.2)
    raise Disturbed(f"the pods of {job} did not end in {timeout:.0f} s")


class Disturbed(RuntimeError):
    """A run that did not go as planned (on a shared machine, another test cluster's pods
    listen on the same ports as ours: PyTorchJob's master port is 23456 in every job): tried
    again, and counted."""


def _expect(how: str, state: str, wanted: str, sink: Records) -> None:
    if state != wanted:
        raise Disturbed(f"{how}: {state}, not {wanted}\n" + "\n".join(sink.text[-40:]))


def _state(mb: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    n = mb * 1024 * 1024 // 4 // (1024 * 1024)
    return {"model": {f"w{i}": torch.randn(1024, 1024, generator=g) for i in range(n)}}


def save_throughput(folder: Path) -> dict[str, float]:
    """Seconds per save, medians: ours blocked (``save`` until it returns: the staging) and
    ours to disk (until ``wait`` returns: staged, written, fsynced, renamed), against
    ``torch.save`` with and without fsync."""
    import torch

    from jupyter_ktrain.pod.checkpoint import Checkpoints

    state = _state(SAVE_MB)
    ours = Checkpoints(folder / "ours")
    plain = folder / "plain"
    plain.mkdir()
    times: dict[str, list[float]] = {"ours": [], "torch": [], "torch_fsync": []}
    blocked: list[float] = []

    def torch_save(step: int, sync: bool) -> None:
        path = plain / f"step-{step}.pt"
        if sync:
            with open(path, "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
        else:
            torch.save(state, path)
        with contextlib.suppress(FileNotFoundError):
            (plain / f"step-{step - 3}.pt").unlink()  # as many files kept as ours keeps

    order = list(times)
    for step in range(SAVE_ROUNDS):
        order = order[1:] + order[:1]  # each goes first, second and last in turn
        for who in order:
            os.sync()  # no save pays for the dirty pages of the one before
            t0 = time.perf_counter()
            if who == "ours":
                with contextlib.redirect_stdout(io.StringIO()):  # its record for the monitor
                    ours.save(state, step)
                    blocked.append(time.perf_counter() - t0)
                    ours.wait()
            else:
                torch_save(step, who == "torch_fsync")
            times[who].append(time.perf_counter() - t0)
    out = {who: statistics.median(ts) for who, ts in times.items()}
    out["ours_blocked"] = statistics.median(blocked)
    return out


def save_figures(saves: dict[str, float]) -> dict[str, Any]:
    return {
        "save_blocked_s_ours": round(saves["ours_blocked"], 3),
        "save_s_torch_save": round(saves["torch"], 3),
        "save_blocked_ratio_vs_torch_save": round(saves["ours_blocked"] / saves["torch"], 3),
        "save_blocked_ratio_vs_torch_save_goal": "<=0.2",
        "save_mb_per_s_ours": round(SAVE_MB / saves["ours"]),
        "save_mb_per_s_torch_save": round(SAVE_MB / saves["torch"]),
        "save_mb_per_s_torch_save_fsync": round(SAVE_MB / saves["torch_fsync"]),
        "save_throughput_ratio_vs_torch_save_fsync": round(saves["torch_fsync"] / saves["ours"], 2),
        "save_throughput_ratio_vs_torch_save_fsync_goal": ">=0.9",
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ktrain-bench-") as tmp_name:
        tmp = Path(tmp_name)
        saves = save_figures(save_throughput(tmp))
        if "--saves-only" in sys.argv:
            print(json.dumps(saves))
            return
        print(f"checkpoint saves: {json.dumps(saves)}", flush=True)
        # the kill marks live in tmp: it stays visible in each container's own /tmp
        with Cluster(tmp / "cluster", shared=tmp) as cluster:
            retried = 0
            samples: dict[str, list[dict[str, float]]] = {}
            for rep in range(REPEATS):  # the modes in turn, so a slow spell hits each alike
                for how in ("master-worker", "elastic", "resubmit"):
                    for attempt in range(TRIES):
                        try:
                            got = recovery(cluster, tmp, f"r-{how}-{rep}-{attempt}", how)
                            break
                        except Disturbed as exc:
                            if attempt == TRIES - 1:
                                raise
                            print(f"run disturbed, once more: {exc}", flush=True)
                            retried += 1
                    samples.setdefault(how, []).append(got)
                    print(f"{how}: {json.dumps({k: round(v, 2) for k, v in got.items()})}")
            runs = {
                how: {k: statistics.median(g[k] for g in got) for k in got[0]}
                for how, got in samples.items()
            }
    ours, elastic, peer = (
        runs[h]["first_step_s"] for h in ("master-worker", "elastic", "resubmit")
    )
    summary = {
        "recovery_s_ours": round(ours, 2),
        "recovery_s_ours_elastic": round(elastic, 2),
        "recovery_s_resubmit_by_hand": round(peer, 2),
        "resume_record_s_ours": round(runs["master-worker"]["resumed_s"], 2),
        "failed_seen_s_resubmit": round(runs["resubmit"]["failed_seen_s"], 2),
        "recovery_speedup_vs_resubmit": round(peer / ours, 2),
        "recovery_speedup_vs_resubmit_goal": ">=1",
        "recovery_speedup_elastic_vs_resubmit": round(peer / elastic, 2),
        "recovery_speedup_elastic_vs_resubmit_goal": ">=1",
        "recovery_runs_tried_again": retried,
        **saves,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
