"""One job as one MLflow run, sent from the notebook side by a background thread.

The follow loop hands :class:`MlflowRun` what it read (:meth:`add`: points and tags), or what
the sender is to read itself (:meth:`add_later`: the follower's thread only queues it); neither
blocks on the network. A sender thread creates the run when it first can, logs the
params and tags once, and sends the points in batches (``MlflowClient.log_batch``, up to 1,000
points a request, a request at most every ``interval`` seconds). A tracking server that is down
or refuses is one warning (:meth:`take_warnings`, shown in the cell by the follower); the
points wait in a bounded buffer (``max_pending``; the oldest are dropped beyond it, and that is
said) and go out once it answers again. What was sent is kept, per run, in the job's record
(:mod:`.store`), so a re-attached kernel sends no point twice.

A job whose ranks run on this machine is not to feel its tracking: given ``spare`` (the cores
idle since it was last asked, :class:`.cpu.SpareCpu`), the sender holds everything (the run's
creation too) while less than :data:`.cpu.SPARE_CORES` was idle, until the job ends, someone
waits on the sender (:meth:`wait`, :meth:`close`), half the buffer is full or it held for
:data:`MAX_HOLD_S`; then it sends what it holds. ``held_s`` says how long it held in all.

MLflow's own HTTP retries would hold the sender for minutes on a server that is down; this
sender retries by itself (every ``retry_s``), so unless the kernel sets them,
``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` is set to 0 and ``MLFLOW_HTTP_REQUEST_TIMEOUT`` to 10 s
(and ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT``: the cell says where the run is, once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ..jobs import FAILED, SUCCEEDED, JobState
from ..store.records import MlflowState, RunRecord, write_run
from .cpu import SPARE_CORES
from .points import Point, Reading, SentSteps

__all__ = ["MlflowRun", "run_link"]

BATCH = 1000  # MLflow's limit of metrics per log_batch
PARAMS_PER_BATCH = 100  # and of params, and of tags
MAX_PENDING = 100_000
MAX_HOLD_S = 30.0  # the longest the sender waits for spare CPU before it sends anyway


def _quiet_client(uri: str) -> Any:
    """An ``MlflowClient`` for ``uri`` whose requests fail fast (see the module docstring)."""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # ours says it once
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def run_link(uri: str, experiment_id: str | None, run_id: str) -> str:
    """Where the run is in the MLflow UI (an http(s) server), else its id."""
    if uri.startswith(("http://", "https://")) and experiment_id:
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"run {run_id}"


class MlflowRun:
    """The run of one job (see the module docstring). ``record`` is the job's record in the
    store (a tracked one's: its ``mlflow`` is set), whose ``mlflow`` part this keeps current
    (``run_id``, ``sent``, ``finished``: :attr:`state`, written back whole); ``new_params`` are
    logged when the run is created here (a resumed run has them already). ``run``: the
    job's run, on a warm job (its record is kept under ``NAME/runs/N``; the MLflow run is
    named ``NAME run N`` and tagged ``ktrain.run``)."""

    def __init__(
        self,
        backend: str,
        name: str,
        record: RunRecord,
        *,
        run: int | None = None,
        new_params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
        client_factory: Callable[[str], Any] = _quiet_client,
        max_pending: int = MAX_PENDING,
        interval: float = 0.5,
        retry_s: float = 2.0,
        spare: Callable[[], float] | None = None,
    ) -> None:
        self.backend, self.name, self.record = backend, name, record
        self.run = run
        self.key = name if run is None else f"{name}/runs/{run}"  # its record's, in the store
        if record.mlflow is None:
            raise ValueError(f"job {name!r} is not tracked: its record has no MLflow part")
        self.state: MlflowState = record.mlflow
        self.uri: str = self.state.uri
        self.experiment: str = self.state.experiment
        self.sent = SentSteps(self.state.sent)
        self._client_factory = client_factory
        self._client: Any = None
        self.max_pending, self.interval, self.retry_s = max_pending, interval, retry_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pending: deque[Point] = deque()
        self._unread: deque[tuple[Callable[[], Reading], int]] = deque()  # and their lines
        self._unread_lines = 0
        self._inflight = 0  # points taken for the request in flight
        self._queued: set[tuple[str, int]] = set()
        self._params = dict(new_params or {}) if not self.state.run_id else {}
        self._tags: dict[str, str] = dict(tags or {})
        self._artifacts: list[tuple[str, str]] = []
        self._end: tuple[str, int] | None = None  # (MLflow run status, end ms)
        self._warnings: list[str] = []
        self._down_since: float | None = None
        self._held_when_down = 0
        self.dropped = 0
        self.requests = 0  # log_batch calls made (the benchmark counts them)
        self.points_sent = 0
        self.experiment_id: str | None = self.state.experiment_id
        self._closed = False
        self._spare = spare
        self._waited_on = False  # someone waits for the sender: it holds nothing back
        self._held_since: float | None = None
        self.held_s = 0.0  # how long the sender held everything for spare CPU
        self._thread = threading.Thread(target=self._loop, name=f"ktrain-mlflow-{name}",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    # -- the follower's side --------------------------------------------------------------
    def add(self, reading: Reading) -> None:
        """Queue a reading's points (those not sent or queued yet) and tags."""
        if not reading.points and not reading.tags:
            return
        with self._lock:
            self._tags.update(reading.tags)
            for p in reading.points:
                key = (p.key, p.step)
                if key in self._queued or key in self.sent:
                    continue
                if len(self._pending) >= self.max_pending:
                    old = self._pending.popleft()
                    self._queued.discard((old.key, old.step))
                    self._dropped_one()
                self._pending.append(p)
                self._queued.add(key)
            full = len(self._pending) >= BATCH
        if full and self._held_since is None:  # a holding sender looks again in its time
            self._wake.set()

    def add_later(self, read: Callable[[], Reading], lines: int) -> None:
        """Queue a reading of ``lines`` lines that the sender makes (``read()``, in its thread,
        in the order queued) before it next sends: the follower pays nothing for it."""
        with self._lock:
            self._unread.append((read, lines))
            self._unread_lines += lines
            full = self._unread_lines >= BATCH
        if full and self._held_since is None:
            self._wake.set()

    def _read_queued(self) -> None:
        while True:  # only this thread takes from the queue: its head stays until added
            with self._lock:
                if not self._unread:
                    return
                read, lines = self._unread[0]
            self.add(read())
            with self._lock:
                self._unread.popleft()
                self._unread_lines -= lines

    def _dropped_one(self) -> None:
        if self.dropped == 0:
            self._warnings.append(
                f"MLflow at {self.uri}: the buffer of {self.max_pending:,} points is full; "
                "the oldest points are dropped until it answers (the count is said at the end)."
            )
        self.dropped += 1

    def tag(self, key: str, value: str) -> None:
        with self._lock:
            self._tags[key] = value

    def artifact(self, path: str, text: str) -> None:
        """Log ``text`` as the artifact ``path`` (e.g. ``logs/rank0.log``)."""
        with self._lock:
            self._artifacts.append((path, text))
        self._wake.set()

    def end(self, state: JobState, end_time: float | None) -> None:
        """The job ended in ``state``: once everything queued is sent, the run is terminated
        (FINISHED, FAILED or KILLED)."""
        status = {SUCCEEDED: "FINISHED", FAILED: "FAILED"}.get(state, "KILLED")
        with self._lock:
            self._tags["ktrain.state"] = state
            self._end = (status, int((end_time or time.time()) * 1000))
        self._wake.set()

    def take_warnings(self) -> list[str]:
        with self._lock:
            out, self._warnings = self._warnings, []
        return out

    @property
    def pending(self) -> int:
        with self._lock:
            queued = len(self._pending) + self._inflight + len(self._artifacts) + len(self._unread)
            return queued + (self._end is not None)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until everything queued is sent; True when it is."""
        deadline = time.monotonic() + timeout
        self._waited_on = True
        self._wake.set()
        while self.pending and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.pending

    def close(self, timeout: float = 0.0) -> None:
        """Stop the sender once it has sent what it holds (waiting up to ``timeout`` s);
        what it could not send stays unsent and unmarked (a later attach sends it)."""
        self.wait(timeout)
        self._closed = True
        self._wake.set()
        self._thread.join(timeout=max(timeout, 1.0))

    @property
    def link(self) -> str:
        run_id = self.state.run_id
        return run_link(self.uri, self.experiment_id, run_id) if run_id else "(no run yet)"

    # -- the sender's side ----------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._closed:
                break
            if self._holding():
                continue
            try:
                while self._send_once() and not self._holding():  # asked again each request
                    pass
            except Exception as exc:  # any failure: the server is down or refuses
                self._failed(exc)
                self._wake.wait(self.retry_s)
                continue
            self._recovered()

    def _holding(self) -> bool:
        """Whether to wait for spare CPU before the next request (see the module docstring)."""
        if self._spare is None:
            return False
        now = time.monotonic()
        with self._lock:
            hurry = (
                self._end is not None
                or self._waited_on
                or len(self._pending) + self._unread_lines >= self.max_pending // 2
                or (self._held_since is not None and now - self._held_since >= MAX_HOLD_S)
            )
        spare = self._spare()  # read at every look: the next one measures from here
        if not hurry and spare < SPARE_CORES:
            if self._held_since is None:
                self._held_since = now
            return True
        if self._held_since is not None:
            self.held_s += now - self._held_since
            self._held_since = None
        return False

    def _failed(self, exc: BaseException) -> None:
        if self._down_since is not None:
            return
        self._down_since = time.time()
        why = " ".join(str(exc).split())[:300] or type(exc).__name__
        with self._lock:
            self._warnings.append(
                f"MLflow at {self.uri} did not take the job's data ({why}). The job runs on; "
                f"its points are held (up to {self.max_pending:,}) and sent when it answers."
            )

    def _recovered(self) -> None:
        if self._down_since is None:
            return
        self._down_since = None
        with self._lock:
            self._warnings.append(f"MLflow at {self.uri} answers again; the held points are sent.")

    def _send_once(self) -> bool:
        """One request's worth; True when there may be more to send now."""
        self._read_queued()
        client = self._client
        if client is None:
            client = self._client = self._client_factory(self.uri)
        run_id = self.state.run_id
        if not run_id:
            self._create_run(client)
            return True
        with self._lock:
            params = dict(list(self._params.items())[:PARAMS_PER_BATCH])
            tags = dict(list(self._tags.items())[:PARAMS_PER_BATCH])
            points = [self._pending.popleft() for _ in range(min(BATCH, len(self._pending)))]
            self._inflight = len(points)
        if params or tags or points:
            try:
                self._log_batch(client, params, tags, points)
            except BaseException:
                with self._lock:  # back in front, in order; beyond the bound the oldest go
                    self._pending.extendleft(reversed(points))
                    while len(self._pending) > self.max_pending:
                        old = self._pending.popleft()
                        self._queued.discard((old.key, old.step))
                        self._dropped_one()
                raise
            finally:
                self._inflight = 0
            return True
        with self._lock:
            artifact = self._artifacts[0] if self._artifacts else None
            end = self._end
        if artifact is not None:
            client.log_text(run_id, artifact[1], artifact[0])
            with self._lock:
                self._artifacts.pop(0)
            return True
        if end is not None:
            client.set_terminated(run_id, status=end[0], end_time=end[1])
            with self._lock:
                self._end = None
            self._save(finished=True)
        return False

    def _create_run(self, client: Any) -> None:
        exp = client.get_experiment_by_name(self.experiment)
        exp_id = exp.experiment_id if exp is not None else client.create_experiment(self.experiment)
        run_name = self.name if self.run is None else f"{self.name} run {self.run}"
        tags = {"mlflow.runName": run_name, "ktrain.job": self.name, "ktrain.backend": self.backend}
        if self.run is not None:
            tags["ktrain.run"] = str(self.run)
        run = client.create_run(
            exp_id,
            start_time=int((self.record.started or time.time()) * 1000),
            tags=tags,
            run_name=run_name,
        )
        self.experiment_id = exp_id
        self._save(run_id=str(run.info.run_id), experiment_id=str(exp_id))

    def _log_batch(
        self, client: Any, params: dict[str, str], tags: dict[str, str], points: list[Point]
    ) -> None:
        from mlflow.entities import Metric, Param, RunTag

        client.log_batch(
            self.state.run_id,
            metrics=[Metric(p.key, p.value, p.timestamp, p.step) for p in points],
            params=[Param(k, v) for k, v in params.items()],
            tags=[RunTag(k, v) for k, v in tags.items()],
            synchronous=True,
        )
        self.requests += 1
        with self._lock:
            for k in params:
                self._params.pop(k, None)
            for k, v in tags.items():
                if self._tags.get(k) == v:
                    del self._tags[k]
            for p in points:
                self._queued.discard((p.key, p.step))
                self.sent.add(p.key, p.step)
        self.points_sent += len(points)
        if points:
            self._save()

    def _save(self, **change: Any) -> None:
        """Keep the run's state in the job's record: what was sent, and ``change``."""
        sent = {k: tuple((lo, hi) for lo, hi in v) for k, v in self.sent.as_dict().items()}
        self.state = dataclasses.replace(self.state, sent=sent, **change)
        self.record = dataclasses.replace(self.record, mlflow=self.state)
        # the store is best effort here: a full disk must not stop the sending
        with contextlib.suppress(OSError):
            write_run(self.backend, self.key, self.record)
