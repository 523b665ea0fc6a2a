"""The Kubernetes backend: preflight, package, create all-or-nothing, watch, stream, explain.

``dryrun`` renders and validates every object once (:mod:`.plan`: a
:class:`~.plan.KubernetesRequest`; the text is their YAML, ConfigMap data summarised).
``schedule`` runs the preflight, packages the code (a code image pushed to the configured
registry and pinned by digest into a new request, else a ConfigMap), creates the planned
objects, the job last, and makes the job own the others (deleted with it); if creating the job
fails, what was made is deleted. Status comes from a watch cache (:mod:`.watch`), logs from
per-pod streams (:mod:`.logs`). Jobs are found by label, so a fresh kernel can list and re-attach.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...config import Config, load_config
from ...errors import (
    BackendError,
    ClusterError,
    JobNotFound,
    KtrainError,
    PreflightError,
    SpecError,
)
from ...jobs import FAILED, RUNNING, TERMINAL_STATES, JobShape, JobStatus, complete_exit_codes
from ...kinds import KIND_TABLE, job_kind
from ...pod.progress import JobProgress, Progress
from ...pod.protocol import EXIT, Exit, Metric, parse_line, record_type
from ..base import Backend, Job, LaunchPlan, LogSource, Request
from ..capabilities import ShapeKnown, WarmCapable
from ..warm import check_warm, warm_shape
from .api import Api, ApiFailure, in_cluster, ns_path
from .history import ClusterHistory
from .kinds import TRAINJOB_TARGET, use_fault_runtime
from .kueue import QueuePositions
from .labels import JOB_LABEL, MANAGED_BY, WARM_LABEL
from .logs import FollowedLines, PodLogSource, split_stamped
from .metrics import SERVICE_MONITOR_API, metrics_service_name
from .plan import KubernetesRequest, Manifest, describe, kind_and_name, render_request
from .preflight import Access, may, run_preflight, serves_service_monitors
from .status import (
    build_status,
    job_shape,
    job_state,
    queued_state,
    replica_pods,
    trainer_progress,
)
from .warm import RunBook
from .warm_backend import WarmJobs, remember
from .watch import JobWatch, owned_workload

if TYPE_CHECKING:
    from ...capture import CapturedProgram
    from ...spec import JobSpec

__all__ = ["KubernetesBackend"]

TAIL_LINES = 50
PROGRESS_TAIL_LINES = 400  # lines of a job's rank-0 pod read for a list's progress
PROGRESS_REFRESH_S = 10.0  # at most this often per running job
DELETE_WAIT_S = 60.0


class JobRuntime:
    """What the logs told us about one job: exit records, each rank's tail, last output."""

    def __init__(self) -> None:
        self.exits: dict[int, tuple[int, int]] = {}
        self.tails: dict[int, collections.deque[str]] = collections.defaultdict(
            lambda: collections.deque(maxlen=TAIL_LINES)
        )
        self.last_progress: float | None = None
        self.progress = JobProgress()  # percent done / ETA from records with a total
        self.loaded = False
        self.lock = threading.Lock()
        self.book = RunBook()  # a warm job's runs, from the same lines
        self.followers = 0  # run streams that feed ``book`` now
        self.aborted: set[int] = set()  # runs this process asked every node to stop
        self.followed: FollowedLines | None = None  # kept in the job store (cleanPodPolicy)

    def on_followed(self, pod: str, ts: int, raw: str) -> None:
        """A line a follow read: kept, then read like any other."""
        if self.followed is not None:
            self.followed.add(pod, ts, raw)
        self.on_line(pod, ts, raw)

    def on_line(self, pod: str, ts: int, raw: str) -> None:
        line = parse_line(raw)
        with self.lock:
            self.book.feed(pod, line)
            self.last_progress = time.time()
            if line.rank is None:
                return
            record = line.typed
            if line.record is None:
                self.tails[line.rank].append(line.text)
            elif isinstance(record, Exit):
                self.exits.setdefault(line.rank, (ts, record.code))
            elif isinstance(record, Metric):
                self.progress.feed(line.rank, record, time.time())


class KubernetesBackend(Backend, WarmCapable, ShapeKnown):
    name = "kubernetes"

    def __init__(
        self,
        config: Config | None = None,
        api: Api | None = None,
        say: Callable[[str], None] | None = None,
    ):
        self.config = config if config is not None else load_config()
        self._api = api
        self.say = say or (lambda text: print(text, file=sys.stdout, flush=True))
        self._watches: dict[str, JobWatch] = {}
        self._queue = QueuePositions()
        self._runtime: dict[str, JobRuntime] = collections.defaultdict(JobRuntime)
        self._kinds: dict[str, str] = {}
        # job -> (uid, when read, progress) of the rank-0 tail read for lists
        self._tail_progress: dict[str, tuple[str, float, Progress | None]] = {}
        self.warm: WarmJobs = WarmJobs(self)  # the runs of --warm jobs
        self.history = ClusterHistory(self)  # ended jobs, kept past their objects
        # each command makes a backend: the watches it opened and the connections of the
        # client it made end with it (their threads hold no reference to it); a watch ends
        # sooner when idle (JobWatch)
        self._owned = _Owned(self._watches)
        self._closer = weakref.finalize(self, self._owned.close)

    def close(self) -> None:
        """End this backend's watches and close its connections now (a later read of a job
        watches it anew)."""
        self._owned.close()

    # -- connection ---------------------------------------------------------------------------
    @property
    def api(self) -> Api:
        if self._api is None:
            self._api = self._owned.api = Api.connect(self.config.kubeconfig, self.config.context)
        return self._api

    @property
    def namespace(self) -> str:
        return self.config.namespace or self.api.namespace

    def namespace_for(self, spec: JobSpec) -> str:
        return str(spec.namespace or self.config.namespace or self.api.namespace)

    # -- plan -------------------------------------------------------------------------------
    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[KubernetesRequest]:
        """The request, rendered once: ``schedule`` creates exactly these objects (on the
        registry route, with the pushed image's digest in place of the placeholder)."""
        if spec.kind not in KIND_TABLE:
            raise SpecError(f"--kind {spec.kind} is not supported by the kubernetes backend.")
        notes: tuple[str, ...] = ()
        if spec.warm:
            check_warm(spec)
            spec = self._default_image(spec)
            spec, found, notes = self.warm.target(spec.evolve(namespace=self.namespace_for(spec)))
            if found is not None:
                return self.warm.run_plan(spec, program, found)
        try:
            spec = spec.evolve(namespace=self.namespace_for(spec))
        except ClusterError as exc:  # a dry run renders without a cluster (e.g. for git)
            spec = spec.evolve(namespace="default")
            notes = (f"no cluster configured ({exc}); namespace shown as 'default'",)
        spec = self._default_image(spec)
        spec, notes = self._default_queue(spec, notes)
        monitor, notes = self._service_monitor(spec, notes)
        registry = self.config.registry or None
        request, files = render_request(spec, program, registry=registry, service_monitor=monitor)
        if KIND_TABLE[spec.kind].trainer_runtime and not notes:
            request, notes = self._fault_runtime(request, spec)
        text = describe(request)
        return LaunchPlan(spec, program, self.name, request, text, files, notes)

    def _default_image(self, spec: JobSpec) -> JobSpec:
        """The image of a job that names none: ``%ktrain config base_image``, else, in a pod
        (a Kubeflow notebook), the image the notebook itself runs on (its libraries are what
        the cell was written against); else none (the render says to pass --image)."""
        image = spec.image or self.config.base_image or (in_cluster() and self._own_image())
        return spec.evolve(image=image) if image and image != spec.image else spec

    def _own_image(self) -> str | None:
        """The first container's image of this process's own pod (``$HOSTNAME`` in the pod's
        namespace), or None where it cannot be read."""
        pod = os.environ.get("HOSTNAME", "")
        try:
            got = self.api.get(ns_path("", "v1", self.api.namespace, "pods", pod)) if pod else {}
        except ClusterError:
            return None
        containers = (got.get("spec") or {}).get("containers") or [{}]
        image = containers[0].get("image")
        return str(image) if image else None

    def _default_queue(
        self, spec: JobSpec, notes: tuple[str, ...]
    ) -> tuple[JobSpec, tuple[str, ...]]:
        """The configured Kueue LocalQueue (``%ktrain config kueue_queue=...``) for a job that
        names none, where Kueue can queue it (not with ``--gang``, not a kind Kueue ignores)."""
        queue, s = self.config.kueue_queue, spec.scheduling
        if not queue or s.kueue_queue or s.gang is not None:
            return spec, notes
        ignores = KIND_TABLE[spec.kind].kueue_ignores
        if ignores:
            why = f"Kueue does not manage {spec.kind} ({ignores}): it runs unqueued"
            return spec, (*notes, f"config kueue_queue={queue} not applied: {why}")
        return spec.evolve(scheduling=replace(s, kueue_queue=queue)), notes

    def _fault_runtime(
        self, request: KubernetesRequest, spec: JobSpec
    ) -> tuple[KubernetesRequest, tuple[str, ...]]:
        """A TrainJob runs on a TrainingRuntime of its own, derived from its
        ClusterTrainingRuntime with the failure policy of every other kind
        (:func:`.kinds.fault_runtime`); where the cluster runtime cannot be read (RBAC), on it
        as it is, with a note saying what that means."""
        path = f"/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/{spec.runtime}"
        as_it_is = (
            f"the TrainJob uses ClusterTrainingRuntime {spec.runtime!r} as it is: its JobSet "
            "restarts a raising rank in place (up to its Job's backoffLimit) instead of failing "
            "at once"
        )
        try:
            cluster_runtime = self.api.get(path)
        except ApiFailure as exc:
            if exc.status == 404:
                raise PreflightError(
                    [
                        f"ClusterTrainingRuntime {spec.runtime!r} does not exist: pick one of "
                        "`kubectl get clustertrainingruntimes` with --runtime, or ask an admin "
                        "to install Trainer's runtimes."
                    ]
                ) from None
            if exc.status != 403:
                raise
            return request, (f"cannot read it (RBAC): {as_it_is}",)
        group = "trainer.kubeflow.org"
        wanted = (
            Access("create", "trainingruntimes", group),
            Access("patch", "trainingruntimes", group),
        )
        if not may(self.api, request.namespace, *wanted):
            return request, (
                f"you may not create TrainingRuntimes in {request.namespace!r}: {as_it_is}",
            )
        from .validate import validate_objects

        out = use_fault_runtime([dict(o) for o in request.objects], spec, cluster_runtime)
        validate_objects(out[:1])
        return replace(request, objects=tuple(out)), ()

    def _service_monitor(
        self, spec: JobSpec, notes: tuple[str, ...]
    ) -> tuple[bool, tuple[str, ...]]:
        """Whether to render a ServiceMonitor: metrics asked and the Prometheus operator's
        API served (discovery); without a cluster, not, with a note saying so."""
        if spec.metrics_port is None:
            return False, notes
        if notes:  # rendered without a cluster
            note = "no ServiceMonitor rendered: it is added when the cluster serves it"
            return False, (*notes, note)
        return serves_service_monitors(self.api), notes

    # -- submit -------------------------------------------------------------------------------
    def schedule(self, plan: LaunchPlan[Request]) -> Job:
        """Preflight, push the code image (registry route), then create the planned objects,
        all-or-nothing. The Job holds the plan as started (with the image digest)."""
        made = plan.made_by(KubernetesRequest)
        if made.request.reuse:
            return self.warm.order(made)
        spec, request = made.spec, made.request
        ns = request.namespace
        warnings = run_preflight(
            self.api,
            spec,
            ns,
            configmap=request.route == "configmap",
            service="Service" in request.kinds,
            service_monitor="ServiceMonitor" in request.kinds,
        )
        for w in warnings:
            self.say(f"warning: {w}")
        group, version, plural = KIND_TABLE[spec.kind].api
        if self.api.exists(ns_path(group, version, ns, plural, spec.name)):
            raise SpecError(
                f"A {spec.kind} named {spec.name!r} already exists in {ns!r}. Pick another "
                f"--name, or remove it with `%ktrain delete {spec.name}`."
            )
        if request.route == "registry":
            made = replace(made, request=self._push(made))
        *owned, job_object = made.request.objects
        created: list[tuple[str, str]] = []
        try:
            for obj in owned:
                self._create(obj, ns)
                created.append(kind_and_name(obj))
            job = self._create(job_object, ns)
            self._own(job, created, ns)
        except Exception:
            for kind, name in created:
                self._delete_one(kind, name, ns)
            raise
        self._kinds[spec.name] = spec.kind
        self.history.started(spec.name)
        self._watch(spec.name)
        if spec.warm:
            remember(ns, spec.name, warm_shape(spec))
        return Job(spec.name, self, made, run=1 if spec.warm else None)

    def _push(self, plan: LaunchPlan[KubernetesRequest]) -> KubernetesRequest:
        """Push the code image; the plan's request with its reference pinned by digest."""
        from ...packaging.progress import auto_progress
        from ...packaging.push import push_code_image

        spec, program, cfg = plan.spec, plan.program, self.config
        base = spec.image or cfg.base_image
        if not base:
            raise SpecError(
                "The registry route needs a base image: pass --image or set "
                "`%ktrain config base_image=IMAGE`."
            )
        result = push_code_image(
            base,
            f"{cfg.registry}",
            plan.files,
            requirements=program.requirements,
            offline=cfg.offline_requirements,
            insecure=cfg.insecure_registries,
            progress=auto_progress(),
        )
        self.say(result.message())
        return plan.request.pinned(result.reference, result.digest)

    def _create(self, obj: Manifest, ns: str) -> dict[str, Any]:
        path = _collection(obj, ns)
        created: dict[str, Any] = self.api.request("POST", path, body=obj)
        return created

    def _own(self, job: dict[str, Any], created: list[tuple[str, str]], ns: str) -> None:
        ref = {
            "apiVersion": job["apiVersion"],
            "kind": job["kind"],
            "name": job["metadata"]["name"],
            "uid": job["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
        for kind, name in created:
            path = ns_path(*_OWNED[kind][:2], ns, _OWNED[kind][2], name)
            body = {"metadata": {"ownerReferences": [ref]}}
            try:
                self.api.request(
                    "PATCH", path, body=body, content_type="application/merge-patch+json"
                )
            except ClusterError:
                self._delete_job(job["kind"], job["metadata"]["name"], ns)
                raise

    # -- lookup -------------------------------------------------------------------------------
    def _kind(self, name: str) -> str:
        if name not in self._kinds:
            for job in self.job_objects(f"{JOB_LABEL}={name}", name):
                if job["metadata"]["name"] == name:
                    self._kinds[name] = job["kind"]
            if name not in self._kinds:
                raise JobNotFound(
                    f"No ktrain job named {name!r} in namespace {self.namespace!r}. "
                    "`%ktrain list --backend kubernetes` shows the jobs there."
                )
        return self._kinds[name]

    def job_object(self, name: str) -> dict[str, Any] | None:
        """The job as its watch holds it now; None once it is gone (its history stays)."""
        try:
            return self._watch(name).job
        except JobNotFound:
            return None

    def runtime(self, name: str) -> JobRuntime:
        """What this process learnt of job ``name`` from its logs (a warm job's run book)."""
        return self._runtime[name]

    def remember_kind(self, name: str, kind: str) -> None:
        self._kinds[name] = kind

    def job_objects(self, selector: str, name: str = "") -> list[dict[str, Any]]:
        """The jobs of every kind matching ``selector``; a kind not served (404) or not
        readable (403: a Kubeflow profile may not read RayJobs) is skipped, but a namespace
        where no kind may be read is one ``forbidden`` error (looking up job ``name``)."""
        out: list[dict[str, Any]] = []
        denied: list[str] = []
        readable = False
        for kind, info in KIND_TABLE.items():
            path = ns_path(*info.api[:2], self.namespace, info.plural)
            try:
                items = self.api.get(path, {"labelSelector": selector}).get("items") or []
            except ApiFailure as exc:
                if exc.status == 403:
                    denied.append(f"{info.plural}.{info.api[0]}" if info.api[0] else info.plural)
                if exc.status in (403, 404):
                    continue
                raise
            readable = True
            for item in items:
                item.setdefault("kind", kind)
            out += items
        if denied and not readable:
            why = f" (to find job {name!r}; cancel and delete need delete too)" if name else ""
            raise self._forbidden(f"list {_some(denied)}{why}")
        return out

    def _forbidden(self, what: str) -> ClusterError:
        """The one line for a request RBAC refuses: which namespace, which right, who fixes it."""
        ns = self.namespace
        return ClusterError(
            f"forbidden: you may not {what} in namespace {ns!r}. Only a RoleBinding there gives "
            f"that right: ask an owner of {ns!r} (in Kubeflow, to add you as a contributor to "
            "that profile), or work in your own namespace."
        )

    def _watch(self, name: str) -> JobWatch:
        watch = self._watches.get(name)
        if watch is not None and not watch.running:  # stopped, idle: watch it anew
            watch.stop()
            watch = None
        if watch is None:
            group, version, plural = KIND_TABLE[self._kind(name)].api
            watch = JobWatch(self.api, self.namespace, group, version, plural, name).start()
            self._watches[name] = watch
        watch.wait_synced()
        return watch

    def _stop_watch(self, name: str) -> None:
        watch = self._watches.pop(name, None)
        if watch is not None:
            watch.stop()

    # -- status -------------------------------------------------------------------------------
    def status(self, name: str) -> JobStatus:
        """The job's status; once its objects are gone, the one kept in its history."""
        try:
            watch = self._watch(name)
        except JobNotFound as exc:
            return self.history.gone(name, exc).status
        job = watch.job
        if job is None:
            self._stop_watch(name)
            self._kinds.pop(name, None)
            gone = JobNotFound(f"Job {name!r} is gone from namespace {self.namespace!r}.")
            return self.history.gone(name, gone).status
        status = self._live_status(name, watch, job)
        if status.terminal:
            self.history.keep(job, watch.pods, status)
        return status

    def _live_status(self, name: str, watch: JobWatch, job: dict[str, Any]) -> JobStatus:
        rt = self._runtime[name]
        if job_state(job)[0] == FAILED and not rt.loaded:
            # the operator may declare the job Failed before the followed streams reached
            # every rank's exit record: read them from the stored logs once, with the kubelet's
            # times (they decide who failed first); lines already followed are not fed twice
            rt.loaded = True
            followed = bool(rt.exits)
            with contextlib.suppress(ClusterError):
                for pod, raw in self._stored_logs(job, watch.pods, stamped=True):
                    parsed = split_stamped(raw.encode())
                    ts, line = parsed if parsed is not None else (0, raw)
                    record = parse_line(line).record if followed else None
                    if not followed or record_type(record) == EXIT:
                        rt.on_line(pod, ts, line)
        workload = watch.workload
        position = self._queue.position(self.api, self.namespace, workload)
        with rt.lock:
            status = build_status(
                job,
                watch.pods,
                watch.events,
                dict(rt.exits),
                {r: list(t) for r, t in rt.tails.items()},
                dict(watch.recreated),
                rt.last_progress,
                progress=rt.progress.progress,
                recreations=dict(watch.recreations),
                last_exits=dict(watch.last_exit),
                workload=workload,
                queue_position=position,
                deleted=dict(watch.deleted),
            )
        if WARM_LABEL in (job["metadata"].get("labels") or {}):
            status = replace(status, warm=self.warm.info(job, status.state))
        kind = job_kind(str(job.get("kind") or ""))
        if kind is None or not kind.replica_ranks:  # ranks map onto replicas only there
            return status
        return complete_exit_codes(status, job_shape(job).procs_per_node)

    def shape(self, name: str) -> JobShape | None:
        try:
            job = self._watch(name).job
        except JobNotFound as exc:
            return self.history.gone(name, exc).shape
        return job_shape(job) if job is not None else None

    def list_jobs(self) -> list[JobStatus]:
        """Every job of this tool in the namespace (one list per kind), each with its progress:
        from this process's follow of the job, else the TrainJob's ``trainerStatus``, else the
        last lines of its rank-0 pod (read at most every PROGRESS_REFRESH_S per running job), so
        the side panel and ``%ktrain list`` show percent and ETA for jobs no kernel follows."""
        out: list[JobStatus] = []
        jobs = self.job_objects(f"{MANAGED_BY[0]}={MANAGED_BY[1]}")
        workloads = self._queue.workloads(self.api, self.namespace, jobs)
        for job in jobs:
            state, reason, message = queued_state(job, owned_workload(job, workloads))
            if state in TERMINAL_STATES and not self.history.is_kept(job):
                with contextlib.suppress(KtrainError):  # kept by its status, once
                    self.status(job["metadata"]["name"])
            progress = self._progress(job, state)
            warm = self.warm.info(job, state)
            out.append(
                JobStatus(
                    job["metadata"]["name"], state, reason, message, progress=progress, warm=warm
                )
            )
        out += self.history.listed({j["metadata"]["name"] for j in jobs})
        return sorted(out, key=lambda s: s.name)

    def _progress(self, job: dict[str, Any], state: str) -> Progress | None:
        meta = job["metadata"]
        name, uid = meta["name"], meta.get("uid", "")
        rt = self._runtime.get(name)
        if rt is not None and rt.progress.progress is not None:
            return rt.progress.progress
        reported = trainer_progress((job.get("status") or {}).get("trainerStatus"))
        if reported is not None:
            return reported
        seen = self._tail_progress.get(name)
        recent = seen is not None and time.monotonic() - seen[1] < PROGRESS_REFRESH_S
        if seen is not None and seen[0] == uid and (state != RUNNING or recent):
            return seen[2]  # kept once the job is over; re-read while it runs
        if state != RUNNING:  # a job never seen running: its logs are not read for a list
            return None
        progress = None
        with contextlib.suppress(ApiFailure, ClusterError):
            progress = self._progress_from_tail(job)
        self._tail_progress[name] = (uid, time.monotonic(), progress)
        return progress

    def _progress_from_tail(self, job: dict[str, Any]) -> Progress | None:
        """Progress from the last PROGRESS_TAIL_LINES lines of the job's first pod (the one
        holding rank 0; an MPIJob's launcher prints every rank)."""
        pods = replica_pods(job)
        kind = job_kind(str(job.get("kind") or ""))
        if not pods and kind is not None and kind.trainer_runtime:
            selector = (
                f"jobset.sigs.k8s.io/jobset-name={job['metadata']['name']},"
                f"jobset.sigs.k8s.io/replicatedjob-name={TRAINJOB_TARGET},"
                "batch.kubernetes.io/job-completion-index=0"
            )
            path = ns_path("", "v1", self.namespace, "pods")
            found = self.api.get(path, {"labelSelector": selector}).get("items") or []
            pods = [p["metadata"]["name"] for p in found]
        if not pods:
            return None
        path, query = self._log_request(job, pods[0])
        query["tailLines"] = PROGRESS_TAIL_LINES
        rt = JobRuntime()  # the same reading of records as a followed job's
        # a stalled read ends the tail (what came is used): a list never hangs on one pod
        for raw in self.api.stream_lines(path, query, read_timeout=10.0, partial=True):
            rt.on_line(pods[0], 0, raw.decode("utf-8", "replace"))
        return rt.progress.progress

    # -- logs ---------------------------------------------------------------------------------
    def log_sources(self, name: str) -> list[LogSource]:
        return self.more_log_sources(name, ())

    def more_log_sources(self, name: str, known: Collection[str]) -> list[LogSource]:
        """Sources for the job's pods not in ``known``: a TrainJob's pods appear as JobSet
        creates them (and a replaced Job pod has a new name), so a follower asks again."""
        try:
            watch = self._watch(name)
        except JobNotFound:  # deleted (a cancel): its status, from its history, says so
            return []
        job = watch.job
        if job is None:  # deleted: status() says so
            return []
        container = KIND_TABLE[job.get("kind") or self._kind(name)].container
        pods = [p for p in replica_pods(job) or sorted(watch.pods) if p not in known]
        rt = self._runtime[name]
        if rt.followed is None:
            rt.followed = FollowedLines.of_job(job)
        return [PodLogSource(self.api, watch, pod, container, rt.on_followed) for pod in pods]

    def read_logs(self, name: str) -> Iterator[tuple[str, str]]:
        yield from self._logs(name, stamped=False)

    def _logs(self, name: str, stamped: bool) -> Iterator[tuple[str, str]]:
        """The stored lines of the job's pods; once its objects are gone, the kept ones."""
        try:
            watch = self._watch(name)
            if watch.job is None:
                raise JobNotFound(f"Job {name!r} is gone from namespace {self.namespace!r}.")
        except JobNotFound as exc:
            yield from self.history.logs(name, exc, stamped)
            return
        yield from self._stored_logs(watch.job, watch.pods, stamped)

    def read_logs_timed(self, name: str) -> Iterator[tuple[float | None, str, str]]:
        """Stored lines with the kubelet's timestamps (``timestamps=true``)."""
        for pod, raw in self._logs(name, stamped=True):
            parsed = split_stamped(raw.encode())
            if parsed is None:
                yield None, pod, raw
            else:
                yield parsed[0] / 1e9, pod, parsed[1]

    def _stored_logs(
        self, job: dict[str, Any], pods: dict[str, Any], stamped: bool = False
    ) -> Iterator[tuple[str, str]]:
        kept = FollowedLines.of_job(job)
        for pod in replica_pods(job) or sorted({*pods, *kept.pods()}):
            obj = pods.get(pod)
            if obj is None:  # deleted (the job failed: cleanPodPolicy): what a follow read
                yield from ((pod, line) for line in kept.lines(pod, stamped))
                continue
            path, query = self._log_request(job, pod)
            if stamped:
                query["timestamps"] = True
            restarts = sum(
                int(cs.get("restartCount") or 0)
                for cs in (obj.get("status") or {}).get("containerStatuses") or []
            )
            passes = [{**query, "previous": True}] if restarts else []
            for q in [*passes, query]:
                try:
                    for raw in self.api.stream_lines(path, q, partial=True):
                        yield pod, raw.decode("utf-8", "replace")
                except ApiFailure as exc:
                    if exc.status not in (400, 404):
                        raise

    def _log_request(self, job: dict[str, Any], pod: str) -> tuple[str, dict[str, Any]]:
        """Path and base query of one of the job's pods' logs (its training container)."""
        kind = job_kind(job.get("kind", ""))
        container = kind.container if kind else ""
        path = ns_path("", "v1", self.namespace, "pods", pod) + "/log"
        return path, ({"container": container} if container else {})

    # -- cancel / delete -------------------------------------------------------------------------
    def cancel(self, name: str) -> None:
        """Delete the job (its pods and ConfigMap go with it); its history is kept."""
        kind = self._kind(name)
        self.history.keep_deleted(name, "a cancel")
        self._stop_watch(name)
        self._delete_job(kind, name, self.namespace)

    def delete(self, name: str) -> None:
        """Delete the job and everything it owns, and wait until nothing is left; its history
        is kept (``%ktrain delete --history`` removes it)."""
        kind = self._kind(name)
        self.history.keep_deleted(name, "%ktrain delete")
        self._stop_watch(name)
        ns = self.namespace
        self._delete_job(kind, name, ns)
        self._delete_one("ConfigMap", f"{name}-code", ns)
        self._delete_one("Service", metrics_service_name(name), ns)
        with contextlib.suppress(ApiFailure):  # 404 too where the CRD is not installed
            self._delete_one("ServiceMonitor", metrics_service_name(name), ns)
        pods = ns_path("", "v1", ns, "pods")
        selector = {"labelSelector": f"{JOB_LABEL}={name}"}
        deadline = time.monotonic() + DELETE_WAIT_S
        while True:
            left = self.api.get(pods, selector).get("items") or []
            group, version, plural = KIND_TABLE[kind].api
            job_left = self.api.exists(ns_path(group, version, ns, plural, name))
            if not left and not job_left:
                break
            if time.monotonic() > deadline:
                names = ", ".join(p["metadata"]["name"] for p in left)
                raise BackendError(
                    f"Job {name!r} was deleted but {names or 'the job object'} is still there "
                    f"after {DELETE_WAIT_S:.0f} s; check finalizers with kubectl describe."
                )
            for pod in left:
                self._delete_one("Pod", pod["metadata"]["name"], ns)
            time.sleep(0.2)
        self._kinds.pop(name, None)
        self._runtime.pop(name, None)

    def _delete_job(self, kind: str, name: str, ns: str) -> None:
        group, version, plural = KIND_TABLE[kind].api
        path = ns_path(group, version, ns, plural, name)
        try:
            self.api.request("DELETE", path, {"propagationPolicy": "Background"})
        except ApiFailure as exc:
            if exc.status == 403:
                res = f"{plural}.{group}" if group else plural
                raise self._forbidden(f"delete {res} ({kind} {name!r} is left as it is)") from None
            if exc.status != 404:
                raise

    def _delete_one(self, kind: str, name: str, ns: str) -> None:
        try:
            self.api.request("DELETE", ns_path(*_OWNED[kind][:2], ns, _OWNED[kind][2], name))
        except ApiFailure as exc:
            if exc.status != 404:
                raise


# kinds made beside the job (created first, then owned by it): (group, version, plural)
_OWNED = {
    "ConfigMap": ("", "v1", "configmaps"),
    "Secret": ("", "v1", "secrets"),
    "Pod": ("", "v1", "pods"),
    "Service": ("", "v1", "services"),
    "ServiceMonitor": SERVICE_MONITOR_API,
    "TrainingRuntime": ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
}


class _Owned:
    """What a backend opened and closes when it ends: its job watches and the client it
    connected (not one it was given)."""

    def __init__(self, watches: dict[str, JobWatch]) -> None:
        self.watches = watches
        self.api: Api | None = None

    def close(self) -> None:
        for watch in list(self.watches.values()):
            watch.stop()
        self.watches.clear()
        if self.api is not None:
            self.api.close()


def _some(names: list[str], shown: int = 3) -> str:
    """``a, b, c and 4 more``."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _collection(obj: Manifest, ns: str) -> str:
    kind = kind_and_name(obj)[0]
    if kind in _OWNED:
        group, version, plural = _OWNED[kind]
        return ns_path(group, version, ns, plural)
    group, version, plural = KIND_TABLE[kind].api
    return ns_path(group, version, ns, plural)
