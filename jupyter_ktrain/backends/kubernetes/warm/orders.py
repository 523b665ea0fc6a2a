"""A warm PyTorchJob: the objects it adds, how a run is ordered, and how a run is read back.

A ``--warm`` job's pods run the warm agent (:mod:`jupyter_ktrain.pod.agent.warm`). Its runs
are ordered through the job's code ConfigMap (``NAME-code``), the ledger: its data are the
run's files and its ``ktrain.io/warm-control`` annotation names the run (``{"run": N, "seq":
Q, "abort": {...}, "idle_limit_s": S}``; ``seq`` counts every change), written with the
ConfigMap's resourceVersion (two kernels: one wins, the other retries on the 409) and read by
a new kernel to learn where the job is. The same order is a data key too
(:data:`~jupyter_ktrain.pod.agent.mirror.CONTROL_KEY`), so a pod's mount of the ConfigMap
holds it: that is how run 1 starts. Every later change reaches the pods from the kernel,
which execs :mod:`jupyter_ktrain.pod.agent.deliver` in each of them with the ConfigMap signed
by the job's key: the Secret ``NAME-warm`` (random, made with the job), which the pods read as
an env var and the kernel through the API. The pods hold no API token and read nothing of the
API; no ServiceAccount, Role or RoleBinding is made. The Secret and the ConfigMap are owned
by the job, so they go with it. The job stays Running between runs: a run's end is read from
the agents' ``run_end`` records in the pod logs (:class:`RunBook`), not from the job's phase.
After its idle limit every agent exits 0, the job succeeds and its ``ttlSecondsAfterFinished``
deletes it with everything it owns.

Pure: no I/O (the key is drawn from the OS's random source).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ....jobs import (
    CANCELLED,
    CANCELLED_BY_USER,
    CANCELLED_REASON,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobState,
    JobStatus,
    ReplicaPhase,
    ReplicaStatus,
)
from ....pod.agent.deliver import KEY_ENV
from ....pod.agent.mirror import (
    CONFIGMAP_ENV,
    CONTROL_ENV,
    CONTROL_KEY,
    CONTROL_PATH,
    PATHS_ANNOTATION,
)
from ....pod.launch import WARM_DIR
from ....pod.progress import JobProgress
from ....pod.protocol import EXIT, RUN, RUN_END, LogLine, Metric, Resume, record_type
from ..labels import CONTROL_ANNOTATION

__all__ = [
    "IDLE_TTL_S",
    "RunBook",
    "control_of",
    "key_secret",
    "order_run",
    "warm_env",
    "warm_key_env",
    "warm_port",
    "warm_secret",
    "with_control",
]

IDLE_TTL_S = 5  # after the idle limit ended the job: deleted, with what it owns, this soon
KEY_FIELD = "key"  # the Secret's one key: 64 hex characters


def warm_port(job: str) -> int:
    """The rendezvous port of warm job ``job`` (the operator's ``pytorchjob-port``): rank 0
    binds it anew for every run, so jobs on one host network (``--host-network``) must not
    share one; each warm job gets its own, from its name, in 20000-29999."""
    return 20000 + int(hashlib.sha256(job.encode()).hexdigest()[:8], 16) % 10000


def warm_secret(job: str) -> str:
    """The Secret that holds warm job ``job``'s key."""
    return f"{job}-warm"


def warm_env(configmap: str) -> tuple[tuple[str, str], ...]:
    """What the warm agent of every pod needs: its job's ConfigMap (what a delivery must be
    for), the run folder."""
    return ((CONFIGMAP_ENV, configmap), (CONTROL_ENV, WARM_DIR))


def warm_key_env(job: str) -> tuple[tuple[str, str, str], ...]:
    """The job's key for the pods' deliveries: (env var, Secret, key), a ``secretKeyRef``."""
    return ((KEY_ENV, warm_secret(job), KEY_FIELD),)


def key_secret(job: str, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The Secret holding a new random key of warm job ``job`` (32 bytes, as hex text: an env
    var cannot hold every byte)."""
    meta = {"name": warm_secret(job), "namespace": namespace, "labels": dict(labels)}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "stringData": {KEY_FIELD: secrets.token_hex(32)},
    }


def control_of(configmap: Mapping[str, Any]) -> dict[str, Any]:
    """The ConfigMap's order: ``{"run": N, "abort": {...}, "idle_limit_s": S}``."""
    meta = configmap.get("metadata") or {}
    try:
        control = json.loads((meta.get("annotations") or {})[CONTROL_ANNOTATION])
    except (KeyError, ValueError, TypeError):
        return {"run": 0, "abort": {}}
    return control if isinstance(control, dict) else {"run": 0, "abort": {}}


def with_control(configmap: dict[str, Any], control: Mapping[str, Any]) -> dict[str, Any]:
    """``configmap`` with ``control`` as its order, one change after its current one (``seq``
    + 1), in its annotation and as the data key the pods' mount shows (a new dict)."""
    order = {**control, "seq": int(control_of(configmap).get("seq") or 0) + 1}
    text = json.dumps(order, sort_keys=True)
    meta = dict(configmap.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations[CONTROL_ANNOTATION] = text
    paths = [p for p in annotations.get(PATHS_ANNOTATION, "").splitlines() if p]
    if f"{CONTROL_KEY}={CONTROL_PATH}" not in paths:
        annotations[PATHS_ANNOTATION] = "\n".join([*paths, f"{CONTROL_KEY}={CONTROL_PATH}"])
    meta["annotations"] = annotations
    return {
        **configmap,
        "metadata": meta,
        "data": {**(configmap.get("data") or {}), CONTROL_KEY: text},
    }


def order_run(current: Mapping[str, Any], fresh: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The ConfigMap that orders the next run: ``current`` (as read, with its version and
    owner) with the data and paths of ``fresh`` (the new run's files), and the run's number."""
    control = control_of(current)
    run = int(control.get("run") or 0) + 1
    body = {k: v for k, v in current.items() if k not in ("data", "binaryData")}
    for key in ("data", "binaryData"):
        if key in fresh:
            body[key] = fresh[key]
    meta = dict(current.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    annotations.update((fresh.get("metadata") or {}).get("annotations") or {})
    meta["annotations"] = annotations
    body["metadata"] = meta
    new = {**control, "run": run, "t": time.time()}
    return with_control(body, new), run


@dataclass
class _Run:
    started: float | None = None
    ends: dict[int, dict[str, Any]] = field(default_factory=dict)  # node -> run_end record
    exits: dict[int, int] = field(default_factory=dict)
    first_failure: int | None = None
    progress: JobProgress = field(default_factory=JobProgress)  # as a job's (one rule)


class RunBook:
    """The runs of one warm job, from the lines of its pods: which run each pod is in (its
    ``run`` record), each rank's exit in it, each node's ``run_end``, and the run's progress
    (its ranks' records, as a job's). Feeding a line twice (a stream read again) changes
    nothing."""

    def __init__(self) -> None:
        self.runs: dict[int, _Run] = {}
        self._current: dict[str, int] = {}  # pod -> the run its lines belong to now

    def feed(self, pod: str, line: LogLine) -> None:
        kind = record_type(line.record)
        record = line.record or {}
        if line.source == "agent" and kind == RUN:
            run = self.runs.setdefault(int(record.get("run", 0)), _Run())
            run.started = run.started or float(record.get("t") or time.time())
            self._current[pod] = int(record.get("run", 0))
        elif line.source == "agent" and kind == RUN_END:
            number = int(record.get("run", 0))
            run = self.runs.setdefault(number, _Run())
            run.ends.setdefault(int(record.get("node", 0)), record)
            ranks = record.get("ranks")
            for rank, code in (ranks if isinstance(ranks, dict) else {}).items():
                run.exits.setdefault(int(rank), int(code))
            self._current.pop(pod, None)
        elif line.rank is not None and kind == EXIT and pod in self._current:
            run = self.runs.setdefault(self._current[pod], _Run())
            code = int(record.get("code", 1))
            if line.rank not in run.exits:
                run.exits[line.rank] = code
                first = run.first_failure
                if code and (first is None or run.exits.get(first) == 143):
                    run.first_failure = line.rank
        elif line.rank is not None and pod in self._current:
            typed = line.typed
            if isinstance(typed, (Metric, Resume)):
                self.runs.setdefault(self._current[pod], _Run()).progress.feed(
                    line.rank, typed, time.time()
                )

    def status(self, name: str, run: int, nodes: int, job: JobStatus) -> JobStatus:
        """Run ``run`` as a status: Pending until a node starts it, Running, then how it
        ended once every node ended it (or the job itself ended)."""
        got = self.runs.get(run)
        if got is None or got.started is None:
            state = PENDING
            if job.terminal:
                why = job.message or job.reason or job.state
                return JobStatus(name, FAILED, job.reason, f"the warm job ended: {why}")
            return JobStatus(name, state)
        replicas = tuple(
            ReplicaStatus(
                name=f"{name}-node-{k}",
                phase=ReplicaPhase.RUNNING if k not in got.ends else ReplicaPhase.ENDED,
                exit_code=got.ends[k].get("code") if k in got.ends else None,
                last_event=str(got.ends.get(k, {}).get("aborted") or ""),
            )
            for k in range(nodes)
        )
        base = JobStatus(
            name,
            RUNNING,
            replicas=replicas,
            exit_codes=dict(got.exits),
            started=got.started,
            failed_rank=got.first_failure,
            progress=got.progress.progress,
        )
        if len(got.ends) < nodes:
            if job.terminal:
                why = job.message or job.reason or job.state
                return _ended(base, FAILED, job.reason, f"the warm job ended: {why}")
            return base
        aborted = [str(e.get("aborted") or "") for e in got.ends.values() if e.get("aborted")]
        codes = [int(e.get("code") or 0) for e in got.ends.values()]
        if any(w.startswith(CANCELLED_BY_USER) for w in aborted):
            return _ended(base, CANCELLED, CANCELLED_REASON, aborted[0])
        if any(codes):
            reason = "RankFailed" if got.first_failure is not None else "NodeFailed"
            why = next((str(e.get("why") or "") for e in got.ends.values() if e.get("code")), "")
            return _ended(base, FAILED, reason, aborted[0] if aborted else why)
        return _ended(base, SUCCEEDED, "AllRanksSucceeded", "")

    def last_end(self) -> tuple[int, float | None, bool]:
        """(last run seen, when its last node ended it or None, whether it is still going)."""
        if not self.runs:
            return 0, None, False
        number = max(self.runs)
        run = self.runs[number]
        ends = [float(e.get("t") or 0) for e in run.ends.values()]
        return number, (max(ends) if ends else None), bool(run.started) and not ends

    def failed_nodes(self, run: int) -> list[int]:
        got = self.runs.get(run)
        return [k for k, e in got.ends.items() if e.get("code")] if got else []

    def ended_nodes(self, run: int) -> int:
        got = self.runs.get(run)
        return len(got.ends) if got else 0


def _ended(status: JobStatus, state: JobState, reason: str, message: str) -> JobStatus:
    from dataclasses import replace

    return replace(status, state=state, reason=reason, message=message, finished=time.time())
