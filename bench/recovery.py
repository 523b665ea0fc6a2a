"""Recovery from a worker's death, on the test cluster, against a cold resubmit by hand measured
in the same run; and checkpoint saves against a plain ``torch.save``.

1. Seconds from a worker's death to the first training step after resume. The job is the
   tests' deterministic training cell (``tests/resume_cells.py``: 2 nodes x 1 rank, a
   checkpoint every 3 steps on a PersistentVolumeClaim). The death is the fault's time, the
   resume the ``resume`` record of ``ktrain.checkpoint().load()``, the first step after it the
   first ``ktrain.report`` record after that (all wall-clock times of this machine, where the
   pods' processes run).

   - killed rank, pod alive (``--elastic 2:2``): the last rank kills itself with SIGKILL after
     step 7 (as the OOM killer does); torchrun restarts the ranks inside the pods, forked from
     the pod's fork server (torch imported once per pod), which rendezvous again and resume;
   - killed rank, Master+Worker (what ``%%ktrain --nodes 2`` renders): the same kill; the
     ExitCode policy makes the failed pods anew, which start as any pod does;
   - deleted pod (``--elastic 2:2``): a rank stops after step 7 and the bench deletes its pod
     (``kubectl delete pod``, as a preemption does); the pod is made anew and rejoins;
   - the peer: the job with ``--max-restarts 0`` and the same kill fails; a user who deletes
     it and resubmits the same cell (same claim) the moment the monitor says Failed, and
     whose code loads the last checkpoint itself: the death to Failed shown, plus the
     resubmit to its first step. No time for a person to notice is counted: the peer's best
     case.

   Each ``--rounds`` times (default 5), the kinds in turn; medians. A round disturbed (another
   test cluster's pods on this machine's ports, a slow spell) is tried again once everything
   of it is gone (its namespace, its pods, the master port), and counted.

2. The local backend (no cluster): a killed rank against the job's first start, the same cell
   as a 2 nodes x 1 rank local job (checkpoints in the job's folder). The first start is the
   submit to the first training step; the recovery the death (the kill mark) to the first step
   after the resume, the restarted node's torchrun and ranks forked from the job's fork server
   (torch imported there while the first attempt trained). ``--rounds`` runs, medians. Goal:
   the recovery at least 3x faster than the first start. ``--local-only`` measures this part
   (and the checkpoint saves) alone.

3. Checkpoints off the training path: ``ktrain.checkpoint().save`` returns once the state is
   staged in CPU memory and writes it in the background (temporary file, fsync, rename, folder
   fsync, prune). Measured against a plain ``torch.save(state, path)`` into the same folder, a
   256 MB state dict, saves interleaved in turn with the page cache written back before each
   (``sync``), :data:`SAVE_ROUNDS` rounds: the time training is blocked per checkpoint (ours:
   until ``save`` returns) against a synchronous ``torch.save``; the writer's throughput (its
   record's ``write_s``: write, fsync, rename) against ``torch.save`` + ``fsync``, what
   durability costs by itself; and, for the record, save to durable end to end (staging
   included). The ratios are the medians of each round's own ratio: this machine's disk has
   slow spells (a save of 0.3 s takes 1.2 s for several saves in a row), and a ratio of saves
   made within the same second compares like with like where medians taken apart do not.
   The throughputs in MB/s are the plain medians.
   ``--saves-only`` measures this part alone (no cluster).

The last line is one JSON object with each figure and, beside it, its goal and whether it is
met.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_ktrain.backends.base import Job
from jupyter_ktrain.backends.kubernetes.backend import KubernetesBackend
from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.capture import capture
from jupyter_ktrain.config import Config
from jupyter_ktrain.flags import parse_flags, spec_from_args
from jupyter_ktrain.monitor.follow_loop import follow
from tests.cluster.cluster import Cluster
from tests.resume_cells import SETUP

FLAGS = "--backend kubernetes --nodes 2 --procs-per-node 1 --image local/python"
SAVE_MB = 256
SAVE_ROUNDS = 15
ROUNDS = 5  # recovery runs of each kind; medians
TRIES = 3  # a run disturbed by another test cluster on this machine is tried again
MASTER_PORT = 23456  # PyTorchJob's, in every job: shared by every pod on this machine
KINDS = ("elastic", "master-worker", "deleted-pod", "resubmit")


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


def local_recovery(tmp: Path, n: int) -> dict[str, float]:
    """One local run (part 2): seconds from the submit to the first step, and from the kill
    to the first step after the resume."""
    marks = tmp / f"local-{n}"
    marks.mkdir()
    name = f"local-kill-{n}"
    flags = "--backend local --nodes 2 --procs-per-node 1 --env OMP_NUM_THREADS=1"
    spec = spec_from_args(parse_flags(flags), name).evolve(name=name)
    backend = LocalBackend()
    program = _program(f"w, first = train(12, 3, 7, marks={str(marks)!r})\n")
    submitted = time.time()
    backend.submit(spec, program)
    sink = Records()
    state = follow(Job(name, backend), sink).state
    _expect("local", state, "Succeeded", sink)
    if not (marks / "killed").exists():
        raise RuntimeError("local: no rank was killed\n" + "\n".join(sink.text[-40:]))
    steps = [r["t"] for r in sink.records if r.get("type") == "metric"]
    _resumed, first_step = _first_step_after_resume(sink.records)
    death = (marks / "killed").stat().st_mtime
    return {"first_start_s": min(steps) - submitted, "recovery_s": first_step - death}


def local_figures(tmp: Path, rounds: int) -> dict[str, Any]:
    """Part 2's medians and goal."""
    runs = []
    for n in range(rounds):
        runs.append(local_recovery(tmp, n))
        print(f"local: {json.dumps({k: round(v, 2) for k, v in runs[-1].items()})}", flush=True)
    first = statistics.median(r["first_start_s"] for r in runs)
    back = statistics.median(r["recovery_s"] for r in runs)
    return {
        "local_first_start_s": round(first, 2),
        "local_recovery_s_killed_rank": round(back, 2),
        "local_killed_rank_speedup_vs_first_start": _goal(round(first / back, 2), ">=3"),
    }


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
    """One run: ``how`` is one of :data:`KINDS`."""
    cluster.create_namespace(ns)
    kubeconfig = cluster.user_kubeconfig(tmp / f"{ns}.kubeconfig", ns)
    backend = KubernetesBackend(
        Config(kubeconfig=str(kubeconfig), namespace=ns), say=lambda t: None
    )
    _claim(cluster, ns, "ckpt")
    marks = tmp / ns
    marks.mkdir()
    kill = "None, hold_at=7" if how == "deleted-pod" else "7"
    cell = f"w, first = train(12, 3, {kill}, marks={str(marks)!r})\n"
    flags = "--env OMP_NUM_THREADS=1 --checkpoints ckpt:/checkpoints"
    extra = {
        "master-worker": "",
        "elastic": "--elastic 2:2",
        "deleted-pod": "--elastic 2:2",
        "resubmit": "--max-restarts 0",
    }
    deleted: list[float] = []
    if how == "deleted-pod":
        _delete_held_pod(cluster, ns, marks, deleted)
    try:
        state, sink = _run(backend, "first", f"{flags} {extra[how]}", cell)
        _expect(how, state, "Failed" if how == "resubmit" else "Succeeded", sink)
        if how == "deleted-pod":
            if not deleted:
                raise Disturbed(f"{how}: no pod was deleted\n" + "\n".join(sink.text[-40:]))
            death = deleted[0]
        elif (marks / "killed").exists():
            death = (marks / "killed").stat().st_mtime
        else:
            raise Disturbed(f"{how}: no rank was killed\n" + "\n".join(sink.text[-40:]))
        out: dict[str, float] = {}
        if how == "resubmit":
            assert sink.failed_at is not None
            out["failed_seen_s"] = sink.failed_at - death
            # the user deletes the failed job and submits it again. Here every pod shares
            # this machine's ports: the new master can listen only once the failed job's pods
            # are gone (on a cluster each pod has its own address). That wait is not counted:
            # the peer's clock starts again at its submit.
            backend.delete("first")
            _wait_gone(cluster, ns)
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


def _delete_held_pod(cluster: Cluster, ns: str, marks: Path, deleted: list[float]) -> None:
    """In the background: delete the pod whose rank stopped at ``hold_at`` (it names itself
    in ``marks/held``) and note when."""

    def run() -> None:
        held = marks / "held"
        deadline = time.monotonic() + 180
        while not held.exists():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        deleted.append(time.time())
        cluster.admin.delete(f"/api/v1/namespaces/{ns}/pods/{held.read_text()}")

    threading.Thread(target=run, daemon=True).start()


def _wait_gone(cluster: Cluster, ns: str, timeout: float = 180) -> None:
    """Until no pod of ``ns`` is left and the master port is free again."""
    path = f"/api/v1/namespaces/{ns}/pods"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # a namespace gone answers 404: nothing left
            if cluster.admin.get(path)["items"]:
                time.sleep(0.2)
                continue
        if _port_free(MASTER_PORT):
            return
        time.sleep(0.2)
    raise Disturbed(f"the pods of {ns} (or the master port) were not gone in {timeout:.0f} s")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


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
    """Seconds per save, medians: ours blocked (``save`` until it returns: the staging), ours
    writing (the record's ``write_s``) and ours to disk (until ``wait`` returns: staged,
    written, fsynced, renamed), against ``torch.save`` with and without fsync."""
    import torch

    from jupyter_ktrain.pod.checkpoint.plain import Checkpoints

    os.environ.setdefault("RANK", "0")  # as in a job's rank 0: it writes its records
    state = _state(SAVE_MB)
    ours = Checkpoints(folder / "ours")
    plain = folder / "plain"
    plain.mkdir()
    times: dict[str, list[float]] = {"ours": [], "torch": [], "torch_fsync": []}
    blocked: list[float] = []
    writes: list[float] = []

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
                said = io.StringIO()
                with contextlib.redirect_stdout(said):  # its record for the monitor
                    ours.save(state, step)
                    blocked.append(time.perf_counter() - t0)
                    ours.wait()
                writes.append(_record(said.getvalue(), "checkpoint")["write_s"])
            else:
                torch_save(step, who == "torch_fsync")
            times[who].append(time.perf_counter() - t0)
    out = {who: statistics.median(ts) for who, ts in times.items()}
    out["ours_blocked"] = statistics.median(blocked)
    out["ours_write"] = statistics.median(writes)
    pairs = zip(blocked, times["torch"], writes, times["torch_fsync"], strict=True)
    per_round = [(b / t, tf / w) for b, t, w, tf in pairs]
    out["blocked_ratio"] = statistics.median(r[0] for r in per_round)
    out["writer_ratio"] = statistics.median(r[1] for r in per_round)
    return out


def _record(text: str, kind: str) -> dict[str, Any]:
    """The last ``kind`` record in ``text`` (a rank's lines)."""
    for line in reversed(text.splitlines()):
        start = line.find("{")
        if start >= 0 and f'"type":"{kind}"' in line.replace(" ", ""):
            return dict(json.loads(line[start:]))
    raise RuntimeError(f"no {kind} record in {text[-500:]!r}")


def _goal(figure: float, goal: str) -> dict[str, Any]:
    """``{"value", "goal", "met"}`` for a goal written ``<=X`` or ``>=X``."""
    bound = float(goal[2:])
    met = figure <= bound if goal.startswith("<=") else figure >= bound
    return {"value": figure, "goal": goal, "met": met}


def save_figures(saves: dict[str, float]) -> dict[str, Any]:
    blocked = round(saves["blocked_ratio"], 3)
    writer = round(saves["writer_ratio"], 2)
    return {
        "save_blocked_s_ours": round(saves["ours_blocked"], 3),
        "save_s_torch_save": round(saves["torch"], 3),
        "save_blocked_ratio_vs_torch_save": _goal(blocked, "<=0.2"),
        "save_mb_per_s_ours_writer": round(SAVE_MB / saves["ours_write"]),
        "save_mb_per_s_ours_end_to_end": round(SAVE_MB / saves["ours"]),
        "save_mb_per_s_torch_save": round(SAVE_MB / saves["torch"]),
        "save_mb_per_s_torch_save_fsync": round(SAVE_MB / saves["torch_fsync"]),
        "save_throughput_ratio_vs_torch_save_fsync": _goal(writer, ">=0.9"),
        "save_end_to_end_ratio_vs_torch_save_fsync": round(saves["torch_fsync"] / saves["ours"], 2),
    }


def _rounds() -> int:
    if "--rounds" in sys.argv:
        return max(1, int(sys.argv[sys.argv.index("--rounds") + 1]))
    return ROUNDS


def _measure(cluster: Cluster, tmp: Path, rounds: int) -> tuple[dict[str, Any], int]:
    """Each kind ``rounds`` times, in turn (a slow spell hits each alike); the medians of each
    figure per kind, and how many runs were tried again."""
    retried = 0
    samples: dict[str, list[dict[str, float]]] = {}
    for rep in range(rounds):
        for how in KINDS:
            for attempt in range(TRIES):
                ns = f"r-{how}-{rep}-{attempt}"
                try:
                    got = recovery(cluster, tmp, ns, how)
                    break
                except Disturbed as exc:
                    if attempt == TRIES - 1:
                        raise
                    print(f"run disturbed, once more: {exc}", flush=True)
                    retried += 1
                    _wait_gone(cluster, ns, timeout=300)  # nothing of it left to disturb
            samples.setdefault(how, []).append(got)
            print(f"{how}: {json.dumps({k: round(v, 2) for k, v in got.items()})}", flush=True)
    runs = {
        how: {k: statistics.median(g[k] for g in got) for k in got[0]}
        for how, got in samples.items()
    }
    return runs, retried


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ktrain-bench-") as tmp_name:
        tmp = Path(tmp_name)
        saves = save_figures(save_throughput(tmp))
        if "--saves-only" in sys.argv:
            print(json.dumps(saves))
            return
        print(f"checkpoint saves: {json.dumps(saves)}", flush=True)
        rounds = _rounds()
        os.environ["KTRAIN_HOME"] = str(tmp / "home")  # the local jobs' folders
        root = str(Path(__file__).resolve().parents[1])  # the jobs' processes import this tree
        os.environ["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
        local = local_figures(tmp, rounds)
        if "--local-only" in sys.argv:
            print(json.dumps({"rounds": rounds, **local, **saves}))
            return
        print(f"local: {json.dumps(local)}", flush=True)
        # the kill marks live in tmp: it stays visible in each container's own /tmp
        with Cluster(tmp / "cluster", shared=tmp) as cluster:
            runs, retried = _measure(cluster, tmp, rounds)
    first = {how: runs[how]["first_step_s"] for how in KINDS}
    peer = first["resubmit"]
    summary = {
        "rounds": rounds,
        "recovery_s_killed_rank_pod_alive": round(first["elastic"], 2),
        "recovery_s_killed_rank_pod_replaced": round(first["master-worker"], 2),
        "recovery_s_deleted_pod": round(first["deleted-pod"], 2),
        "recovery_s_resubmit_by_hand": round(peer, 2),
        "resume_record_s_pod_alive": round(runs["elastic"]["resumed_s"], 2),
        "failed_seen_s_resubmit": round(runs["resubmit"]["failed_seen_s"], 2),
        "killed_rank_pod_alive_speedup_vs_resubmit": _goal(
            round(peer / first["elastic"], 2), ">=3"
        ),
        "killed_rank_pod_replaced_speedup_vs_resubmit": round(peer / first["master-worker"], 2),
        "deleted_pod_speedup_vs_resubmit": _goal(round(peer / first["deleted-pod"], 2), ">=1"),
        "recovery_runs_tried_again": retried,
        **local,
        **saves,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
