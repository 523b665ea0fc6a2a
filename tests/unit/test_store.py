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
from jupyter_ktrain.jobs import Eviction, JobShape, JobStatus, ReplicaStatus
from jupyter_ktrain.store import home
from jupyter_ktrain.store.history import HISTORY_VERSION, keep, kept
from jupyter_ktrain.store.records import RECORD_VERSION, job_dir, read_record, write_record
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

    from jupyter_ktrain.backends.kubernetes.status.history import ClusterHistory

    keep("kubernetes", _status(), None)
    newer = keep("kubernetes", dataclasses.replace(_status(), name="st-b"), None)
    _edit_state(newer, lambda raw: raw.update(version=HISTORY_VERSION + 1))
    history = ClusterHistory(SimpleNamespace(namespace="default"))  # type: ignore[arg-type]
    assert [s.name for s in history.listed(set())] == ["st-a"]
    with pytest.raises(StoreVersionError):
        kept("kubernetes", "st-b")
