"""The runs of a warm PyTorchJob, for :class:`~.backend.KubernetesBackend` (which delegates its
warm hooks here): find the live warm job a cell runs on, order a run through the job's code
ConfigMap and deliver it to the pods (:class:`~.warm_delivery.Courier`), follow a run from the
agents' records in the pod logs (:class:`~.warm.RunBook`), cancel it, change the idle limit.
What a warm job is now (its ledger, its run book, what ``%ktrain list`` shows) is read by
:class:`~.warm_ledger.WarmLedger`; the objects themselves and the pure parts are in :mod:`.warm`.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ....errors import BackendError, ClusterError, JobNotFound, SpecError
from ....jobs import CANCELLED_BY_USER, PENDING, RUNNING, SUCCEEDED, JobStatus
from ....pod.protocol import RUN, RUN_END, parse_line, record_type
from ....store.warm_ledger import forget_ended
from ...base import LaunchPlan
from ...logsource import LogSource
from ...warm_shape import shape_changes, warm_shape
from ..client.fields import annotations_of, labels_of
from ..client.retries import ApiFailure, Conflict
from ..cluster import BACKEND_NAME, Cluster
from ..labels import SHAPE_ANNOTATION, WARM_LABEL
from ..logs.streams import JobLogs
from ..lookup import job_object, job_objects, remember_kind
from ..plans.plan import KubernetesRequest, describe
from ..status.derive import job_state
from ..status.job_runtime import JobRuntime
from ..status.reader import JobStatuses
from .delivery import Courier
from .ledger import WarmLedger
from .orders import control_of, order_run, with_control

if TYPE_CHECKING:
    from ....capture import CapturedProgram
    from ....spec.job import JobSpec

__all__ = ["WarmJobs"]

# how long a run waits for the nodes of the run before, which failed on a node, to stop
STOPPING_WAIT_S = 30.0


class WarmJobs:
    """The warm jobs of the ``cluster`` context's namespace and their runs (the backend's
    ``warm``): read through ``ledger``, followed through ``logs``, their status from
    ``statuses``."""

    def __init__(
        self,
        cluster: Cluster,
        statuses: JobStatuses,
        logs: JobLogs,
        ledger: WarmLedger,
    ) -> None:
        self.cluster = cluster
        self.statuses = statuses
        self.logs = logs
        self.ledger = ledger
        self._courier: Courier | None = None

    @property
    def courier(self) -> Courier:
        if self._courier is None:
            self._courier = Courier(self.cluster.api)
        return self._courier

    def _nodes(self, name: str) -> int:
        shape = self.statuses.shape(name)
        return shape.nodes if shape is not None else 1

    def _warm_jobs(self) -> list[dict[str, Any]]:
        """The live warm jobs of the namespace, newest first."""
        jobs = [
            j
            for j in job_objects(self.cluster, f"{WARM_LABEL}=true")
            if job_state(j)[0] in (PENDING, RUNNING)
        ]
        return sorted(jobs, key=lambda j: j["metadata"].get("creationTimestamp", ""), reverse=True)

    def target(self, spec: JobSpec) -> tuple[JobSpec, dict[str, Any] | None, tuple[str, ...]]:
        """The live warm job this cell runs on (``--name``'s, else the newest of its shape),
        or None with notes saying why a new one starts."""
        shape = warm_shape(spec)

        def shape_of(job: dict[str, Any]) -> dict[str, Any]:
            raw = annotations_of(job).get(SHAPE_ANNOTATION, "{}")
            return dict(json.loads(raw))

        live = self._warm_jobs()
        ended = forget_ended(
            self.cluster.namespace_for(spec), {j["metadata"]["name"] for j in live}, shape
        )
        named = [j for j in live if j["metadata"]["name"] == spec.name]
        same = [j for j in live if shape_of(j) == shape]
        if named and shape_of(named[0]) == shape:
            return spec, named[0], ()
        if named:
            changes = ", ".join(shape_changes(shape_of(named[0]), shape))
            raise SpecError(
                f"The warm job {spec.name!r} has another shape ({changes}): delete it first "
                f"(`%ktrain delete {spec.name}`), or drop --name to start a new warm job."
            )
        if same:
            return spec.evolve(name=same[0]["metadata"]["name"]), same[0], ()
        notes = ["warm job: its pods stay up after this run for the next --warm cell"]
        if live:
            other = live[0]["metadata"]["name"]
            changes = ", ".join(shape_changes(shape_of(live[0]), shape))
            notes.insert(
                0,
                f"the warm job {other!r} has another shape ({changes}): starting a new warm "
                f"job; {other!r} keeps its pods until its idle limit (`%ktrain warm {other} "
                "--idle 0` ends it now)",
            )
        if self.cluster.config.registry:
            notes.append("warm job: each run's program travels in its ConfigMap, not the registry")
        for gone in ended:
            notes.insert(0, f"the warm job {gone!r} has ended (its idle limit, or it was deleted)")
        return spec, None, tuple(notes)

    def run_plan(
        self, spec: JobSpec, program: CapturedProgram, job: dict[str, Any]
    ) -> LaunchPlan[KubernetesRequest]:
        """A run on the live warm job ``job``: only its ConfigMap's data change."""
        from ....packaging.configmap import render_code_configmap
        from ..plans.manifests import shipped_files
        from ..plans.podtemplate import CodeSource

        name, ns = job["metadata"]["name"], spec.namespace or self.cluster.namespace
        busy = self._active_run(name)
        if busy is not None and self._stopping(name, busy):
            # the run before failed on a node and the others are being stopped (the cell that
            # ran it has raised already): the next run waits for them, not the user
            deadline = time.monotonic() + STOPPING_WAIT_S
            while busy is not None and time.monotonic() < deadline:
                time.sleep(0.2)
                busy = self._active_run(name)
        if busy is not None:
            raise SpecError(
                f"The warm job {name!r} is busy with run {busy}: wait for it, or stop it with "
                f"`%ktrain cancel {name} --run {busy}`."
            )
        files = shipped_files(spec, CodeSource(), program.files, program.source)
        cm = render_code_configmap(f"{name}-code", ns, files)
        request = KubernetesRequest(ns, "configmap", (cm,), reuse=True)
        text = (
            f"# {name}: the next run on the warm job (its pods are ready): only the program "
            f"travels, in ConfigMap {name}-code, delivered to each pod by exec, signed with the "
            f"job's key\n" + describe(request)
        )
        note = f"run on the warm job {name!r} (same shape: its pods are ready)"
        return LaunchPlan(spec, program, BACKEND_NAME, request, text, files, (note,))

    def _change_control(
        self, name: str, change: Callable[[dict[str, Any]], None], strict: bool = True
    ) -> int:
        """Apply ``change`` to the warm job's order (retried on a conflict) and deliver it to
        the pods; the run it names. A pod that did not take it: BackendError when
        ``strict``."""
        for _ in range(5):
            cm = self.ledger.configmap(name)
            control = control_of(cm)
            change(control)
            try:
                now = self.ledger.put_configmap(name, with_control(cm, control))
            except Conflict:
                continue
            problems = self.courier.deliver(self.cluster.namespace, name, now)
            if problems and strict:
                raise BackendError(
                    f"The warm job {name!r}'s order did not reach every pod: {'; '.join(problems)}."
                )
            return int(control.get("run") or 0)
        raise BackendError(f"Could not update the warm job {name!r}'s ConfigMap (conflicts).")

    def order(self, plan: LaunchPlan[KubernetesRequest]) -> int:
        """Write the run into the ledger, then deliver it to every pod; the run's number. A
        pod that cannot take it: the run is stopped on the others and one error says why."""
        name = plan.spec.name
        for _ in range(5):
            body, run = order_run(self.ledger.configmap(name), plan.request.objects[0])
            try:
                now = self.ledger.put_configmap(name, body)
            except Conflict:
                continue
            problems = self.courier.deliver(self.cluster.namespace, name, now, self._nodes(name))
            if problems:
                self._stop_undelivered(name, run, problems)
            remember_kind(self.cluster, name, plan.spec.kind)
            return run
        raise BackendError(f"Could not order a run on the warm job {name!r} (conflicts).")

    def _stop_undelivered(self, name: str, run: int, problems: list[str]) -> None:
        why = "it did not reach every pod"
        with contextlib.suppress(ClusterError, BackendError):
            self._change_control(
                name, lambda c: c.setdefault("abort", {}).setdefault(str(run), why), strict=False
            )
        raise BackendError(
            f"Run {run} did not reach every pod of the warm job {name!r}: {'; '.join(problems)}. "
            f"It was stopped where it started. If this persists, end the job with "
            f"`%ktrain delete {name}` and run the cell again."
        )

    def _stopping(self, name: str, run: int) -> bool:
        """Run ``run`` failed on a node or was ordered to stop: its other nodes are ending it."""
        rt = self.cluster.runtimes.of(name)
        if run in rt.aborted:
            return True
        return bool(self.ledger.book(name).failed_nodes(run)) or str(run) in (
            self.ledger.control(name).get("abort") or {}
        )

    def _active_run(self, name: str) -> int | None:
        """The run ordered last, while some node has not ended it; None when idle. A run this
        process followed to its end on every node is over without reading the pods' logs
        again (a run's end is never undone; one ordered since has a higher number)."""
        run = int(self.ledger.control(name).get("run") or 0)
        if not run:
            return None
        nodes = self._nodes(name)
        rt = self.cluster.runtimes.of(name)
        with rt.lock:
            followed_to_end = rt.book.ended_nodes(run) >= nodes
        if followed_to_end:
            return None
        return run if self.ledger.book(name).ended_nodes(run) < nodes else None

    def latest_run(self, name: str) -> int | None:
        job = job_object(self.cluster, name)
        if job is None or WARM_LABEL not in labels_of(job):
            return None
        with contextlib.suppress(ApiFailure):
            return int(self.ledger.control(name).get("run") or 0) or None
        return None

    def run_status(self, name: str, run: int) -> JobStatus:
        job = self.statuses.status(name)
        nodes = self._nodes(name)
        rt = self.cluster.runtimes.of(name)
        book = self.ledger.book(name)
        with rt.lock:
            status = book.status(name, run, nodes, job)
            failed = book.failed_nodes(run)
            ended = book.ended_nodes(run)
        if failed and ended < nodes and run not in rt.aborted and rt.followers:
            # a node's run failed: the others are stopped too (a rank blocked in a collective
            # would hold the run), after a moment to end by themselves
            rt.aborted.add(run)
            why = f"node {failed[0]} failed"
            with contextlib.suppress(ClusterError, BackendError):  # it failed anyway: say that
                self._change_control(
                    name, lambda c: c.setdefault("abort", {}).setdefault(str(run), why), False
                )
        return status

    def run_log_sources(self, name: str, run: int) -> list[LogSource]:
        rt = self.cluster.runtimes.of(name)
        return [_RunSource(s, run, rt) for s in self.logs.sources(name)]

    def read_run_logs(self, name: str, run: int) -> Iterator[tuple[str, str]]:
        where: dict[str, int] = {}
        for pod, raw in self.logs.read(name):
            if _in_run(pod, raw, run, where):
                yield pod, raw

    def cancel_run(self, name: str, run: int) -> None:
        """Order every pod to stop the run (the ConfigMap, delivered) and wait until they did."""
        if self.run_status(name, run).terminal:
            return
        self._change_control(
            name, lambda c: c.setdefault("abort", {}).setdefault(str(run), CANCELLED_BY_USER)
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.run_status(name, run).terminal:
                return
            time.sleep(0.3)
        raise BackendError(f"Run {run} of {name!r} did not stop within 30 s; its pods still run.")

    def set_idle_limit(self, name: str, seconds: float) -> JobStatus:
        """``%ktrain warm NAME --idle``: the agents end after this long without a run (0: now);
        the job then succeeds and is deleted with everything it owns."""
        if self.latest_run(name) is None:
            raise SpecError(f"{name!r} is no warm job: only a --warm job has an idle limit.")

        def change(control: dict[str, Any]) -> None:
            control["idle_limit_s"] = float(seconds)

        self._change_control(name, change)
        if seconds > 0:
            return self.statuses.status(name)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                status = self.statuses.status(name)
            except JobNotFound:  # ended, and already deleted with what it owned
                why = "ended with --idle 0 and deleted with everything it owned"
                return JobStatus(name, SUCCEEDED, "IdleLimit", why, finished=time.time())
            if status.terminal:
                return status
            time.sleep(0.3)
        raise BackendError(f"The warm job {name!r} still runs 60 s after --idle 0.")


class _RunSource(LogSource):
    """One pod's lines of one run of a warm job: from the agent's ``run`` record of that run
    to its ``run_end`` (a pod's log holds every run)."""

    def __init__(self, inner: LogSource, run: int, rt: JobRuntime):
        self.inner = inner
        self.replica = inner.replica
        self.run = run
        self.rt = rt
        self.inside = False
        self.ended = False
        with rt.lock:
            rt.followers += 1
        self._closed = False

    def _keep(self, lines: list[str]) -> list[str]:
        out = []
        for raw in lines:
            line = parse_line(raw)
            kind = record_type(line.record) if line.source == "agent" else None
            number = (line.record or {}).get("run")
            if kind == RUN and number == self.run:
                self.inside = True
            if self.inside and not self.ended:
                out.append(raw)
            if kind == RUN_END and number == self.run:
                self.ended = True
        return out

    def read(self) -> list[str]:
        return self._keep(self.inner.read())

    def finish(self) -> list[str]:
        return self.read()  # the run ended (its records came): its pod keeps running

    @property
    def done(self) -> bool:
        return self.ended

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self.rt.lock:
                self.rt.followers -= 1
        self.inner.close()


def _in_run(pod: str, raw: str, run: int, state: dict[str, int]) -> bool:
    """Whether ``raw`` (a stored line of ``pod``) belongs to ``run``; ``state`` keeps each
    pod's current run as the lines go by."""
    line = parse_line(raw)
    kind = record_type(line.record) if line.source == "agent" else None
    number = (line.record or {}).get("run")
    if kind == RUN and isinstance(number, int):
        state[pod] = number
    inside = state.get(pod) == run
    if kind == RUN_END and number == run:
        state[pod] = 0
    return inside
