"""A job's history in the job store: the final status read back whole, its logs bounded."""

from __future__ import annotations

import os
from pathlib import Path

from jupyter_ktrain.backends.kubernetes.logs.pod import FollowedLines
from jupyter_ktrain.jobs import Eviction, JobShape, JobStatus, ReplicaStatus
from jupyter_ktrain.pod.progress import Progress
from jupyter_ktrain.store.history import (
    forget_state,
    keep,
    kept,
    kept_names,
    prune_logs,
)


def _failed() -> JobStatus:
    return JobStatus(
        "hist-a",
        "Failed",
        "ExitCode",
        "rank 1 exited with code 3",
        exit_codes={0: 143, 1: 3},
        replicas=(
            ReplicaStatus("hist-a-master-0", "Failed", 1, "node-1", 143, "Killed", "exit 137"),
            ReplicaStatus("hist-a-worker-0", "Failed", 0, "node-2", 3),
        ),
        started=100.0,
        finished=160.5,
        failed_rank=1,
        progress=Progress(step=29, total=30, t=150.0, eta_s=0.0),
        max_restarts=3,
        evictions=(Eviction("Preempted", "preempted by a higher-priority job", 2),),
        admitted_by="ClusterQueue 'q'",
    )


def test_a_kept_status_comes_back_whole_and_marked_as_history() -> None:
    """What ``%ktrain status`` and the panel show once the objects are gone: every field the
    job ended with, its shape, where it ran, and that it is history."""
    status, shape = _failed(), JobShape("PyTorchJob", 2, 2, 1)
    folder = keep("kubernetes", status, shape, uid="u-1", namespace="team")
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    assert oct((folder / "state.json").stat().st_mode & 0o777) == "0o600"
    back = kept("kubernetes", "hist-a")
    assert back is not None
    assert back.status.from_history
    assert not status.from_history
    assert back.status == status.__class__(**{**status.__dict__, "from_history": True})
    assert back.status.exit_codes == {0: 143, 1: 3}
    assert back.status.replicas[0].restart_cause == "exit 137"
    assert back.status.progress is not None
    assert back.status.progress.step == 29
    assert (back.shape, back.uid, back.namespace) == (shape, "u-1", "team")
    assert kept_names("kubernetes") == ["hist-a"]
    assert kept("kubernetes", "other") is None
    assert kept("local", "hist-a") is None


def test_a_new_job_of_the_name_drops_the_old_state_and_logs_but_not_its_record() -> None:
    folder = keep("kubernetes", _failed(), None, uid="u-1")
    (folder / "run.json").write_text("{}")
    FollowedLines(folder / "logs" / "u-1").add("hist-a-master-0", [(1, "old line")])
    forget_state("kubernetes", "hist-a")
    assert kept("kubernetes", "hist-a") is None
    assert not (folder / "logs").exists()
    assert (folder / "run.json").exists()


def test_kept_logs_are_bounded_oldest_job_first() -> None:
    """Past the bound, the oldest ended job's logs go; its state stays (a few hundred bytes),
    and the newest job's logs are whole."""
    folders = []
    for i, name in enumerate(["old", "mid", "new"]):
        folder = keep("kubernetes", JobStatus(name, "Succeeded"), None, uid=f"u{i}")
        lines = FollowedLines(folder / "logs" / f"u{i}")
        lines.add_missing(f"{name}-0", [(t, "x" * 990) for t in range(100)])  # ~100 KB
        os.utime(folder / "state.json", (1000 + i, 1000 + i))
        folders.append(folder)
    assert prune_logs("kubernetes", bound=250_000) == ["old"]
    assert not (folders[0] / "logs").exists()
    assert kept("kubernetes", "old") is not None  # its state is kept
    assert len(FollowedLines(folders[2] / "logs" / "u2").lines("new-0")) == 100
    assert prune_logs("kubernetes", bound=250_000) == []


def test_a_pods_whole_log_is_merged_with_what_a_follow_kept(tmp_path: Path) -> None:
    """At the job's end its pods' stored logs are copied in: lines a follow wrote already are
    not written again, the ones no follow read are."""
    lines = FollowedLines(tmp_path / "u")
    lines.add("p-0", [(10, "step 1")])
    lines.add("p-0", [(20, "step 2")])
    assert lines.add_missing("p-0", [(10, "step 1"), (20, "step 2"), (30, "step 3")]) == 1
    assert lines.add_missing("p-0", [(10, "step 1"), (30, "step 3")]) == 0
    assert lines.lines("p-0") == ["step 1", "step 2", "step 3"]
    assert (tmp_path / "u" / "p-0.log").read_text().count("\n") == 3


def test_lines_a_follow_missed_read_back_in_the_kubelets_order(tmp_path: Path) -> None:
    """A follow kept the traceback; the line before it, missed, is added at the job's end:
    read back, the rank's lines are in their order (the exception line stays last)."""
    kept = FollowedLines(tmp_path)
    kept.add("p", [(20, "Traceback (most recent call last):")])
    kept.add("p", [(30, "ValueError: no shard")])
    assert (
        kept.add_missing("p", [(10, "rank 3 up"), (20, "Traceback (most recent call last):")]) == 1
    )
    assert kept.lines("p") == [
        "rank 3 up",
        "Traceback (most recent call last):",
        "ValueError: no shard",
    ]


def test_a_later_look_that_sees_fewer_pods_does_not_forget_how_they_ended() -> None:
    """The first look saw worker 0 end (exit 3); a later one (a watch started after the
    operator deleted its pod) sees no pod: the kept status still says how it ended."""
    from dataclasses import replace

    from jupyter_ktrain.backends.kubernetes.status.cluster_history import knowing_more

    first = _failed()
    later = replace(
        first,
        exit_codes={0: 143, 1: 1},
        replicas=(first.replicas[0], ReplicaStatus("hist-a-worker-0", "NotCreated")),
    )
    merged = knowing_more(later, first)
    assert merged.replicas == first.replicas
    assert merged.exit_codes == {0: 143, 1: 3}
    assert knowing_more(first, later) == first  # a look that knows more wins
