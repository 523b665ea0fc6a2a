"""The job store (``jupyter_ktrain/store/``): one place reads ``KTRAIN_HOME``; every file it
writes carries a ``version`` and is read tolerantly (entries it does not know are ignored, an
older version is read, a newer one refused with one line); and it sits at the bottom of the
package, importing only the job vocabulary and the errors."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

import jupyter_ktrain
from jupyter_ktrain.jobs import Eviction, JobShape, JobStatus, ReplicaStatus, TrialState
from jupyter_ktrain.store import home
from jupyter_ktrain.store.history import HISTORY_VERSION, keep, kept
from jupyter_ktrain.store.records import (
    RECORD_VERSION,
    MlflowState,
    RunRecord,
    job_dir,
    read_record,
    read_run,
    write_record,
    write_run,
)
from jupyter_ktrain.store.sweeps import SWEEP_VERSION, SweepState, keep_sweep, read_sweep
from jupyter_ktrain.store.versions import StoreVersionError

PACKAGE = Path(jupyter_ktrain.__file__).resolve().parent


def _status() -> JobStatus:
    return JobStatus(
        "st-a",
        "Failed",
        "ExitCode",
        "rank 1 exited with code 3",
        exit_codes={0: 0, 1: 3},
        replicas=(ReplicaStatus("st-a-master-0", "Failed", 1, "node-1", 3, "exit 3"),),
        evictions=(Eviction("Preempted", "preempted", 1),),
    )


def _edit_state(folder: Path, change: object) -> None:
    path = folder / "state.json"
    raw = json.loads(path.read_text())
    change(raw)  # type: ignore[operator]
    path.write_text(json.dumps(raw))


def test_the_store_is_under_ktrain_home(ktrain_home: Path) -> None:
    assert home.ktrain_home() == ktrain_home
    assert home.jobs_dir() == ktrain_home / "jobs"
    assert home.history_dir() == ktrain_home / "history"
    assert job_dir("kubernetes", "a") == ktrain_home / "history" / "kubernetes" / "a"


def test_a_kept_state_with_entries_this_version_does_not_know_is_still_history() -> None:
    """A newer writer added an entry to a replica (and elsewhere): this version reads the rest,
    as ``status_from_json`` says, instead of reading no history at all."""
    status, shape = _status(), JobShape("PyTorchJob", 2, 1, 0)
    folder = keep("kubernetes", status, shape, uid="u-1")

    def more(raw: dict) -> None:  # type: ignore[type-arg]
        raw["status"]["replicas"][0]["zone"] = "eu-1"

    _edit_state(folder, more)
    back = kept("kubernetes", "st-a")
    assert back is not None
    assert back.status.replicas == status.replicas

    def everywhere(raw: dict) -> None:  # type: ignore[type-arg]
        raw["status"]["evictions"][0]["queue"] = "q"
        raw["status"]["cost"] = 12
        raw["shape"]["arch"] = "arm64"
        raw["cluster"] = "c-1"

    _edit_state(folder, everywhere)
    back = kept("kubernetes", "st-a")
    assert back is not None
    assert (back.status.evictions, back.shape, back.uid) == (status.evictions, shape, "u-1")


def test_a_kept_state_is_versioned_older_ones_read_newer_ones_refused() -> None:
    folder = keep("kubernetes", _status(), None)
    assert json.loads((folder / "state.json").read_text())["version"] == HISTORY_VERSION

    def older(raw: dict) -> None:  # type: ignore[type-arg]
        del raw["version"]  # written before versions: version 1

    _edit_state(folder, older)
    assert kept("kubernetes", "st-a") is not None

    def newer(raw: dict) -> None:  # type: ignore[type-arg]
        raw["version"] = HISTORY_VERSION + 1

    _edit_state(folder, newer)
    with pytest.raises(StoreVersionError) as info:
        kept("kubernetes", "st-a")
    said = str(info.value)
    assert "\n" not in said
    assert "history/kubernetes/st-a/state.json" in said
    assert "newer jupyter-ktrain" in said


def test_a_record_is_versioned_and_read_tolerantly() -> None:
    write_record("local", "r-a", {"name": "r-a", "params": {"lr": 0.1}})
    path = job_dir("local", "r-a") / "run.json"
    raw = json.loads(path.read_text())
    assert raw["version"] == RECORD_VERSION
    assert read_record("local", "r-a") == raw
    path.write_text(json.dumps({"name": "r-a", "params": {}, "later": [1]}))  # older, and more
    assert read_record("local", "r-a") == {"name": "r-a", "params": {}, "later": [1]}
    path.write_text(json.dumps({"version": RECORD_VERSION + 1, "name": "r-a"}))
    with pytest.raises(StoreVersionError, match=r"history/local/r-a/run.json is version \d+"):
        read_record("local", "r-a")


def test_an_old_run_record_reads_typed_and_is_written_back_the_same() -> None:
    """A ``run.json`` from before versions and types (no ``version``, a key this version does
    not know) reads as a :class:`RunRecord`; written back, the file holds what it held (less
    the unknown key, plus the version)."""
    old = {
        "name": "r-b", "backend": "local", "started": 1700000000.5,
        "params": {"lr": "0.1", "cell": "train()"}, "code_sha256": "ab12", "run": 3,
        "mlflow": {"uri": "http://127.0.0.1:5000", "experiment": "ktrain", "run_id": "f00",
                   "experiment_id": "7", "sent": {"loss": [[0, 9], [12, 12]]},
                   "tags": {"ktrain.sweep": "s"}, "finished": True},
        "later": {"a newer writer's": 1},
    }  # fmt: skip
    path = job_dir("local", "r-b") / "run.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    record = read_run("local", "r-b")
    assert record == RunRecord(
        "r-b", "local", 1700000000.5, {"lr": "0.1", "cell": "train()"}, "ab12", 3,
        MlflowState("http://127.0.0.1:5000", "ktrain", {"loss": ((0, 9), (12, 12))},
                    {"ktrain.sweep": "s"}, "f00", "7", finished=True),
    )  # fmt: skip
    write_run("local", "r-b", record)
    del old["later"]
    assert json.loads(path.read_text()) == {**old, "version": RECORD_VERSION}
    untracked = {"name": "r-c", "params": {}}  # the least a record held
    path.write_text(json.dumps(untracked))
    assert read_run("local", "r-b") == RunRecord("r-c")
    path.write_text(json.dumps({"version": RECORD_VERSION + 1, "name": "r-b"}))
    with pytest.raises(StoreVersionError, match=r"history/local/r-b/run.json is version \d+"):
        read_run("local", "r-b")


def test_an_old_sweep_record_reads_typed_its_states_as_enums(ktrain_home: Path) -> None:
    """A sweep record from before versions reads as a :class:`SweepRecord`: each trial's state
    a :class:`TrialState` (Pruned among its job's words), the sweep's a :class:`SweepState`;
    written back it is the same file."""
    old = {
        "name": "sw", "backend": "local", "objective": "loss:min", "space": ["x=choice(1, 2)"],
        "search": "grid", "trials": 2, "parallel": 1, "warm": False, "prune_after": 5,
        "started": 10.0, "ended": 20.0, "state": "Done", "host": "h", "pid": 42,
        "rows": [
            {"number": 0, "params": {"x": 1}, "state": "Succeeded", "objective": 0.5,
             "job": "sw-t0", "run": None, "error": "", "started": 10.0, "ended": 15.0},
            {"number": 1, "params": {"x": 2}, "state": "Pruned", "objective": 0.9,
             "job": "sw-t1", "run": None, "error": "pruned at step 5", "started": 11.0,
             "ended": 16.0},
        ],
        "curves": {"1": [[0, 1.0], [5, 0.9]]}, "best": 0,
    }  # fmt: skip
    path = ktrain_home / "sweeps" / "sw.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**old, "later": 1}))
    record = read_sweep("sw")
    assert record is not None
    assert (record.state, [r.state for r in record.rows]) == (
        SweepState.DONE, [TrialState.SUCCEEDED, TrialState.PRUNED]
    )  # fmt: skip
    assert record.curves == {1: ((0, 1.0), (5, 0.9))}
    keep_sweep(record)
    assert json.loads(path.read_text()) == {**old, "version": SWEEP_VERSION}
    path.write_text(json.dumps({**old, "version": SWEEP_VERSION + 1}))
    with pytest.raises(StoreVersionError, match="newer jupyter-ktrain"):
        read_sweep("sw")


# -- its place: the bottom ------------------------------------------------------------------
BELOW = ("jupyter_ktrain.errors", "jupyter_ktrain.jobs", "jupyter_ktrain.kinds")
POD = "jupyter_ktrain.pod"  # the standard-library-only layer the job vocabulary stands on


def _imports(path: Path) -> set[str]:
    """The package's modules ``path`` imports, every import (module level, in functions, under
    ``if TYPE_CHECKING:``), relative ones resolved."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.add(".".join([*base, *(node.module or "").split(".")]).strip("."))
    return {m for m in found if m.startswith("jupyter_ktrain")}


def test_the_store_imports_nothing_above_it() -> None:
    above = {}
    for path in sorted((PACKAGE / "store").glob("*.py")):
        outside = {
            m
            for m in _imports(path)
            if not m.startswith("jupyter_ktrain.store")
            and not any(m == b or m.startswith(b + ".") for b in (*BELOW, POD))
        }
        if outside:
            above[path.name] = sorted(outside)
    assert above == {}


def test_only_the_store_reads_ktrain_home() -> None:
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and any(
                isinstance(a, ast.Constant) and a.value == "KTRAIN_HOME" for a in node.args
            ):
                readers.append(path.relative_to(PACKAGE).as_posix())
    assert readers == ["store/home.py"]


def test_a_local_jobs_meta_is_versioned_and_a_newer_one_refused(tmp_path: Path) -> None:
    from jupyter_ktrain.backends.local.folders import JOB_META_VERSION, JobFolders

    folders = JobFolders(tmp_path)
    folder = folders.job_dir("m-a")
    folder.mkdir(parents=True)
    meta = {"kind": "PyTorchJob", "nodes": 2, "nproc": 1, "gpus": 0, "later": True}
    (folder / "job.json").write_text(json.dumps(meta))  # before versions, and one entry more
    assert folders.shape("m-a") == JobShape("PyTorchJob", 2, 1, 0)
    (folder / "job.json").write_text(json.dumps({**meta, "version": JOB_META_VERSION + 1}))
    assert folders.shape("m-a") is None
    with pytest.raises(
        StoreVersionError, match=r"^m-a/job.json is version \d+, written by a newer"
    ):
        folders.meta("m-a")


def test_a_newer_versions_history_is_left_out_of_a_list_not_the_whole_list() -> None:
    """`%ktrain list` of a cluster: one history file from a newer jupyter-ktrain is skipped
    (its `%ktrain status` says why), the others are listed."""
    from types import SimpleNamespace

    from jupyter_ktrain.backends.kubernetes.status.cluster_history import ClusterHistory

    keep("kubernetes", _status(), None)
    newer = keep("kubernetes", dataclasses.replace(_status(), name="st-b"), None)
    _edit_state(newer, lambda raw: raw.update(version=HISTORY_VERSION + 1))
    history = ClusterHistory(SimpleNamespace(namespace="default"))  # type: ignore[arg-type]
    assert [s.name for s in history.listed(set())] == ["st-a"]
    with pytest.raises(StoreVersionError):
        kept("kubernetes", "st-b")
