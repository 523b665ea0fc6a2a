"""A sweep, end to end: many trials of one cell, each a run of the one runner
(:func:`~jupyter_ktrain.runner.run.run`), ``parallel`` at once.

Each trial binds the swept names in the namespace the cell's code is captured from (they
travel as the notebook's values do), and runs as its own job ``NAME-tN``, or, with
``--warm``, as the next run on a free one of the sweep's warm jobs ``NAME-w0``..``NAME-wP-1``
(one thread per slot). A trial is followed headless (:mod:`.follow_trial`: its objective as it is
reported, the median rule); the front is spoken to from the calling thread only: a line per
trial start and end, the sweep's record each time it is written, the table at the end, the
best trial's names bound. The sweep's warm jobs
end with it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..backends.base import Backend, Job
from ..backends.capabilities import warm_capable
from ..capture.names import name_use
from ..errors import JobNotFound, KtrainError, SpecError
from ..extras import require
from ..runner.front import Front
from ..runner.options import RunOptions
from ..runner.run import check, run
from ..runner.source import Source
from ..runner.verbs import open_backend
from ..spec.job import default_name
from ..store.sweeps import SweepRecord, SweepState, TrialRow, keep_sweep
from ..sweep_spec.sweep_options import SweepOptions
from .follow_trial import Board, follow_trial
from .record import DONE, INTERRUPTED, RUNNING, STOPPED, make_record, row_of, running_row
from .tracked import end_parent, start_parent, trial_under
from .trials import CANCELLED, FAILED, Sweep, Trial, best_of, params_text

if TYPE_CHECKING:
    from ..tracking.sweep_run import SweepRun
    from .search import Search

__all__ = ["SLOT_ENV", "SweepShown", "check_call", "run_sweep"]

SLOT_ENV = "KTRAIN_SWEEP_SLOT"  # a warm slot's job name, in its processes (and its shape)
IDLE_WAIT_S = 30.0  # the most a slot waits for its warm job to record its last run's end
KEEP_EVERY_S = 1.0  # the sweep's record is written at most this often while trials report


@runtime_checkable
class SweepShown(Protocol):
    """A front that shows a running sweep: it gets the sweep's record each time the sweep
    writes it (the notebook draws its view). A text front has none: the lines said as the
    sweep runs are its view."""

    def show_sweep(self, record: SweepRecord) -> None: ...


def run_sweep(source: Source, options: RunOptions, sweep: SweepOptions, front: Front) -> Sweep:
    """Run the sweep ``sweep`` of runs of ``source`` with ``options``; the :class:`Sweep`
    (the best trial's names bound through ``front``). Bad input raises one
    :class:`SpecError` before any job starts; Ctrl-C cancels the running trials and returns
    what ran."""
    name, backend, where = _prepare(source, options, sweep)
    from .search import Search  # Optuna, an optional extra: loaded when a sweep runs

    runner = _Runner(source, options, sweep, name, backend, Search(sweep))
    front.say(runner.opening())
    runner.parent = start_parent(where, name, backend.name, sweep, front.say)
    runner.keep(front)
    try:
        runner.go(front)
    except KeyboardInterrupt:
        runner.stop("the sweep was interrupted")
        runner.wait(front)
    finally:
        runner.keep(front, ended=True)  # its views say it ended: what follows prints under them
        runner.end_warm(front)
    if runner.interrupted:
        front.say(f"Sweep {name!r} interrupted: its running trials were cancelled.")
    result = Sweep(name, sweep.objective, tuple(sorted(runner.trials, key=lambda t: t.number)))
    front.say(result.table())
    end_parent(runner.parent, runner.state(ended=True), result, front.say)
    best = result.best
    if best is not None and best.handle is not None and not runner.interrupted:
        front.bind({k: v for k, v in best.handle.outputs.items() if k != "_"})
    return result


def _probe(param: Any) -> Any:
    return param.choices[0] if param.kind == "choice" else param.low


def _prepare(
    source: Source, options: RunOptions, sweep: SweepOptions
) -> tuple[str, Backend, tuple[str, str] | None]:
    """Every check of the sweep, before any job: the cell captures with the swept names bound
    and reads each of them, the trials' jobs can be made (names, --warm, MLflow), no job of
    their names exists (unless --replace: then they are deleted now), Optuna is installed.
    The sweep's name, the backend, where it is tracked (MLflow's URI and experiment)."""
    require("sweep", "A sweep (it searches with Optuna)")
    probe = {p.name: _probe(p) for p in sweep.params}
    program = _bound(source, probe).capture(options.allow_secrets, options.by_reference)
    use = name_use(source.cell)
    unread = [n for n in sweep.names if n not in use.at_definition | use.at_call]
    if unread:
        raise SpecError(
            f"--sweep {', '.join(unread)}: the cell does not read {', '.join(unread)}, so the "
            f"trials would all run the same. Pass it in the cell's call, e.g. "
            f"`{program.entry}({unread[0]}={unread[0]})`."
        )
    name = options.values.get("name") or default_name(program.entry)
    names = _job_names(name, sweep, options)
    spec = RunOptions({**options.values, "name": names[-1]}, options.backend).spec(program.entry)
    where = check(spec)  # the runner's checks: --warm, MLflow when the trials are tracked
    backend = open_backend(spec.backend)
    for job in names:
        try:
            backend.status(job)
        except JobNotFound:
            continue
        if not options.replace:
            raise SpecError(
                f"A job {job!r} exists (an earlier sweep of this name?): add --replace to "
                f"delete the sweep's earlier jobs first, or give another --name."
            )
        backend.delete(job)
    return name, backend, where


def _job_names(name: str, sweep: SweepOptions, options: RunOptions) -> list[str]:
    if options.values.get("warm"):
        return [f"{name}-w{k}" for k in range(min(sweep.parallel, sweep.trials))]
    return [f"{name}-t{n}" for n in range(sweep.trials)]


def _bound(source: Source, params: Mapping[str, Any]) -> Source:
    """``source`` with the swept names bound over its namespace: the capture ships them as
    the notebook's values (``lr = 0.0003`` ahead of the cell), the user's own untouched (and
    a name IPython keeps for itself is the trial's here)."""
    namespace = {**source.namespace, **params}  # a shallow copy: the same objects
    hidden = [name for name in source.hidden if name not in params]
    return dataclasses.replace(source, namespace=namespace, hidden=hidden)


def check_call(func: Callable[..., Any], args: Any, kwargs: Mapping[str, Any], names: Any) -> None:
    """``ktrain.sweep``: ``func`` takes the swept names as keyword arguments, else one error."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **{**kwargs, **dict.fromkeys(names)})
    except TypeError as exc:
        raise SpecError(
            f"ktrain.sweep calls {getattr(func, '__name__', 'func')}(..., "
            f"{', '.join(f'{n}=...' for n in names)}) but it does not take that ({exc}): each "
            f"swept name is passed as a keyword argument."
        ) from None


class _TrialFront:
    """What the runner says of a trial's start (the plan's notes, "Started ..."): kept off
    the sweep's output, but for each distinct warning, said once."""

    def __init__(self, said: Callable[[str], None], seen: set[str]) -> None:
        self.said = said
        self.seen = seen

    def say(self, text: str) -> None:
        if text.startswith("warning:") and text not in self.seen:
            self.seen.add(text)
            self.said(text)

    def view(self, job: Job, model: Any) -> Any:
        raise AssertionError("a trial is started detached")

    def bind(self, outputs: Mapping[str, Any]) -> None:
        return None


class _Runner:
    """The trials of one sweep, run from ``parallel`` slot threads."""

    def __init__(
        self,
        source: Source,
        options: RunOptions,
        sweep: SweepOptions,
        name: str,
        backend: Backend,
        search: Search,
    ) -> None:
        self.source, self.options, self.sweep = source, options, sweep
        self.name, self.backend = name, backend
        self.warm = bool(options.values.get("warm"))
        self.search = search
        self.board = Board(sweep.objective, sweep.prune_after)
        self.lock = threading.Lock()
        self.messages: queue.Queue[str] = queue.Queue()
        self.trials: list[Trial] = []
        self.asked = 0
        self.running: dict[int, Job] = {}
        self.started_warm: set[str] = set()
        self.stopped = threading.Event()
        self.interrupted = False
        self.seen: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.started = time.time()
        self.live: dict[int, TrialRow] = {}  # each running trial's row
        self.rows: list[TrialRow] = []  # each ended trial's row
        self.kept_at = 0.0
        self.failed_stop = False
        self.parent: SweepRun | None = None  # the sweep's MLflow run, when it is tracked

    def state(self, ended: bool) -> SweepState:
        """The sweep's state now (``ended``: as it ended)."""
        if not ended:
            return RUNNING
        return INTERRUPTED if self.interrupted else STOPPED if self.failed_stop else DONE

    def keep(self, front: Front, ended: bool = False) -> None:
        """Write the sweep's record as it stands (the job store's) and show it (``front``'s
        sweep view): what the views read."""
        with self.lock:
            rows = [*self.rows]
            rows += [
                dataclasses.replace(row, objective=self.board.last(number))
                for number, row in self.live.items()
            ]
        curves = self.board.curves()
        record = make_record(
            self.name, self.backend.name, self.sweep, self.warm, self.started, self.state(ended),
            rows,
            curves, time.time() if ended else None,
        )  # fmt: skip
        self.kept_at = time.monotonic()
        try:
            keep_sweep(record)
        except KtrainError as exc:  # the sweep goes on: its record is a view, said once
            if "record" not in self.seen:
                self.seen.add("record")
                self.messages.put(f"warning: the sweep's record could not be written: {exc}")
        if isinstance(front, SweepShown):
            front.show_sweep(record)

    def opening(self) -> str:
        s = self.sweep
        on = (
            f"{len(_job_names(self.name, s, self.options))} warm job(s) "
            f"{self.name}-w0..w{min(s.parallel, s.trials) - 1}"
            if self.warm
            else f"a job each ({self.name}-t0..t{s.trials - 1})"
        )
        prune = f"pruning after step {s.prune_after}" if s.prune_after is not None else "no pruning"
        space = "; ".join(str(p) for p in s.params)
        return (
            f"Sweep {self.name!r}: {s.trials} trial(s), {s.parallel} at a time on {on}; "
            f"{s.search} search of {space}; objective {s.objective}; {prune}"
        )

    # -- the calling thread ----------------------------------------------------------------
    def go(self, front: Front) -> None:
        slots = min(self.sweep.parallel, self.sweep.trials)
        self.threads = [
            threading.Thread(target=self._slot, args=(k,), name=f"sweep-{k}", daemon=True)
            for k in range(slots)
        ]
        for thread in self.threads:
            thread.start()
        self.wait(front)

    def wait(self, front: Front) -> None:
        """Say what the slots tell, until every slot ended."""
        while any(t.is_alive() for t in self.threads) or not self.messages.empty():
            try:
                front.say(self.messages.get(timeout=0.1))
            except queue.Empty:
                if time.monotonic() - self.kept_at >= KEEP_EVERY_S:
                    self.keep(front)
            else:
                self.keep(front)  # a trial started or ended

    def stop(self, why: str) -> None:
        """No next trial; every running one cancelled."""
        self.interrupted = self.interrupted or why == "the sweep was interrupted"
        self.stopped.set()
        with self.lock:
            running = list(self.running.values())
        for job in running:
            try:
                job.cancel()
            except KtrainError as exc:
                self.messages.put(f"could not cancel {job.name!r}: {exc}")

    def end_warm(self, front: Front) -> None:
        """The sweep's warm jobs end with it."""
        for job in sorted(self.started_warm):
            try:
                warm_capable(self.backend, job).set_idle_limit(job, 0)
            except KtrainError as exc:
                front.say(f"could not end the warm job {job!r}: {exc}")
        if self.started_warm:
            front.say(f"Ended the sweep's warm job(s) {', '.join(sorted(self.started_warm))}.")

    # -- a slot's thread --------------------------------------------------------------------
    def _slot(self, slot: int) -> None:
        while not self.stopped.is_set():
            with self.lock:
                if self.asked >= self.sweep.trials:
                    return
                self.asked += 1
            number, params = self.search.ask()
            started = time.time()
            trial = self._trial(number, params, slot)
            self.search.tell(number, trial.state, trial.objective)
            with self.lock:
                self.trials.append(trial)
                self.live.pop(number, None)
                self.rows.append(row_of(trial, started, time.time()))
                best = best_of(self.trials, self.sweep.objective)
            self.messages.put(_ended(trial, best, self.sweep.objective.name))
            if trial.state == FAILED and self.sweep.stop_on_failure:
                self.messages.put(f"Stopping the sweep: trial {number} failed (--stop-on-failure).")
                self.failed_stop = True
                self.stop("a trial failed")

    def _trial(self, number: int, params: dict[str, Any], slot: int) -> Trial:
        job_name = f"{self.name}-w{slot}" if self.warm else f"{self.name}-t{number}"
        values: dict[str, Any] = {**self.options.values, "name": job_name}
        if self.warm:
            values["env"] = [*values.get("env", ()), (SLOT_ENV, job_name)]
        options = dataclasses.replace(self.options, values=values, detach=True, replace=False)
        front = _TrialFront(self.messages.put, self.seen)
        try:
            if self.warm:
                _idle(self.backend, job_name)
            job = run(_bound(self.source, params), options, front)
        except KtrainError as exc:
            return Trial(number, params, FAILED, job=job_name, error=str(exc).split("\n")[0])
        with self.lock:
            if self.warm:
                self.started_warm.add(job_name)
            self.running[number] = job
            self.live[number] = running_row(number, params, job.name, job.run, time.time(), None)
            stopped = self.stopped.is_set()
        trial_under(self.parent, job, self.name, number)
        if stopped:
            job.cancel()
        where = f"{job.name!r} run {job.run}" if job.run is not None else f"{job.name!r}"
        self.messages.put(f"trial {number} started on {where}: {params_text(params)}")
        try:
            return follow_trial(number, params, job, self.board, self.sweep.objective, front.say)
        except (KtrainError, OSError) as exc:  # the job went from under it: this trial failed
            with contextlib.suppress(KtrainError, OSError):
                job.cancel()
            why = f"it could not be followed: {str(exc).splitlines()[0] if str(exc) else exc!r}"
            return Trial(number, params, FAILED, self.board.last(number), job.name, job.run, why)
        finally:
            with self.lock:
                self.running.pop(number, None)


def _idle(backend: Backend, name: str, timeout: float = IDLE_WAIT_S) -> None:
    """Wait until the slot's warm job ``name`` says its last run ended: a run's own state
    says so a moment before the job's does, and a run ordered between the two is refused as
    busy. A job not made yet, or ended, is idle."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = backend.status(name)
        except JobNotFound:
            return
        if status.terminal or status.warm is None or status.warm.active is None:
            return
        time.sleep(0.05)


def _ended(trial: Trial, best: Trial | None, metric: str) -> str:
    value = f", {metric}={trial.objective:.6g}" if trial.objective is not None else ""
    why = f": {trial.error}" if trial.error and trial.state != CANCELLED else ""
    head = f"trial {trial.number} {trial.state}{value}{why} ({params_text(trial.params)})"
    if best is None:
        return head
    return f"{head}; best so far: trial {best.number}, {metric}={best.objective:.6g}"
