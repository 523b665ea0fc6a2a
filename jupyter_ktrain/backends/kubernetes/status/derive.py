"""From the watch cache (job, pods, events) and what the logs said to a :class:`JobStatus`. Pure.

State: the operator's last true condition (``Succeeded``/``Failed``, TrainJob's ``Complete``),
else ``Running`` when it says so, else ``Pending``. Per replica: pod phase, restarts, node and
the event or container reason that matters (FailedScheduling, ImagePullBackOff, OOMKilled,
BackOff). The first failing rank comes from ``exit`` records in the logs (earliest timestamp),
else from container exit codes; its class comes from :func:`.failures.classify`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ....failures import classify, pod_problem
from ....jobs import (
    DELETED_AFTER_END,
    DELETED_WHILE_RUNNING,
    FAILED,
    PENDING,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    TERMINAL_STATES,
    JobShape,
    JobState,
    JobStatus,
    ReplicaPhase,
    ReplicaStatus,
)
from ....kinds import DEFAULT_KIND, ReplicaType, job_kind
from ....pod.exits import PEER_LOST, restart_cause
from ....pod.progress import Progress
from ..client.fields import ContainerStatus, Terminated, conditions, container_statuses, pod_phase
from ..labels import MAX_RESTARTS_ANNOTATION
from ..plans.placement import assigned_domains, describe_domains
from .kueue import queue_info, queued_message

__all__ = [
    "build_status",
    "job_shape",
    "job_state",
    "node_rank",
    "queued_state",
    "replica_pods",
    "trainer_progress",
]

_EVENT_REASONS = ("FailedScheduling", "Failed", "BackOff", "ErrImagePull", "FailedMount")
STALL_S = 60.0
# a TrainJob's pods: the JobSet's restart count (a fault restarts every Job, new pod names)
JOBSET_RESTARTS_LABEL = "jobset.sigs.k8s.io/restart-attempt"


def job_state(job: Mapping[str, Any]) -> tuple[JobState, str, str]:
    """(state, reason, message) from the job's conditions (a RayJob's: its two fields)."""
    status = job.get("status") or {}
    if "jobDeploymentStatus" in status:
        return _ray_state(status)
    true = [c for c in conditions(job) if c.true]
    for c in reversed(true):
        if c.type in ("Succeeded", "Complete"):
            return SUCCEEDED, c.reason, c.message
        if c.type == "Failed":
            return FAILED, c.reason, c.message
    for c in reversed(true):
        if c.type == "Running":
            return RUNNING, "", ""
        if c.type in ("Suspended", "Restarting"):
            return PENDING if c.type == "Suspended" else RUNNING, c.reason, ""
    return PENDING, "", ""


def queued_state(
    job: Mapping[str, Any], workload: Mapping[str, Any] | None, position: int | None = None
) -> tuple[JobState, str, str]:
    """:func:`job_state`, except that a job its Kueue ``workload`` has not admitted (yet, or
    again after an eviction) is ``Queued``, with Kueue's reason. An admitted job Kueue placed by
    topology says where (its Workload's topology assignment) while it has nothing else to say."""
    state, reason, message = job_state(job)
    if workload and state == PENDING:
        queue = queue_info(workload, position)
        if not queue.admitted:
            return (QUEUED, *queued_message(queue))
        if not reason or reason.endswith("Suspended"):  # admitted: its pods are on their way
            where = f" to ClusterQueue {queue.cluster_queue!r}" if queue.cluster_queue else ""
            placed = describe_domains(assigned_domains(workload))
            where += f", placed: {placed}" if placed else ""
            return state, "Admitted", f"admitted by Kueue{where}"
    if workload and not message and state not in TERMINAL_STATES:
        placed = describe_domains(assigned_domains(workload))
        if placed:
            return state, reason, f"placed by Kueue: {placed}"
    return state, reason, message


def _dashboard(status: Mapping[str, Any]) -> str:
    """A RayJob's Ray dashboard (KubeRay's ``status.dashboardURL``: the head Service's dashboard
    port, reachable in the cluster or through ``kubectl port-forward``), as a link."""
    url = str(status.get("dashboardURL") or "")
    if not url:
        return ""
    return f"Ray dashboard: {url if '://' in url else 'http://' + url}"


def _ray_state(status: Mapping[str, Any]) -> tuple[JobState, str, str]:
    """A RayJob's state: KubeRay's ``jobDeploymentStatus`` (its own progress: Initializing,
    Running, Complete, Failed, Suspended...) and Ray's ``jobStatus`` (the driver's: PENDING,
    RUNNING, SUCCEEDED, FAILED, STOPPED). It ends when the deployment is Complete or Failed; a
    job Ray stopped (``ray job stop``) ends Failed."""
    deployment = str(status.get("jobDeploymentStatus") or "")
    ray = str(status.get("jobStatus") or "")
    reason, message = str(status.get("reason") or ""), str(status.get("message") or "")
    if ray == "SUCCEEDED" and deployment != "Failed":
        return SUCCEEDED, reason, message
    if deployment in ("Complete", "Failed") or ray in ("FAILED", "STOPPED"):
        return FAILED, reason or ray.title() or deployment, message
    if deployment == "Suspended":
        return PENDING, "Suspended", message
    if ray == "RUNNING" or deployment == "Running":
        return RUNNING, "", ""
    return PENDING, reason, message


def replica_pods(job: Mapping[str, Any]) -> list[str]:
    """Pod names the operator creates for a job with replica specs, in node-rank order (each
    replica type's names as :mod:`jupyter_ktrain.kinds` says: the MPI controller names its one
    launcher ``<job>-launcher``, with no index); empty for a kind without (a TrainJob)."""
    name = job["metadata"]["name"]
    kind = job_kind(str(job.get("kind") or ""))
    replicas = (job.get("spec") or {}).get(kind.replica_key or "") if kind else None
    if not kind or not replicas:
        return []
    out: list[str] = []
    for rtype in sorted(replicas, key=kind.rank_order):
        count = int((replicas[rtype] or {}).get("replicas", 1))
        out += (kind.replica(rtype) or ReplicaType(rtype)).pods(name, count)
    return out


def node_rank(job: Mapping[str, Any], pod: str) -> int | None:
    names = replica_pods(job)
    return names.index(pod) if pod in names else None


def nproc(job: Mapping[str, Any]) -> int:
    value = (job.get("spec") or {}).get("nprocPerNode") or "1"
    return int(value) if str(value).isdigit() else 1


def _container(pod: Mapping[str, Any]) -> ContainerStatus:
    """The pod's first container's status (the training one); an empty one before it runs."""
    statuses = container_statuses(pod)
    return statuses[0] if statuses else ContainerStatus("", 0, {}, {})


def _terminated(pod: Mapping[str, Any]) -> Terminated | None:
    return _container(pod).terminated


def _exit_code(pod: Mapping[str, Any]) -> int | None:
    term = _terminated(pod)
    return term.exit_code if term is not None else None


def _term_reason(pod: Mapping[str, Any]) -> str:
    term = _terminated(pod)
    return (term.reason if term else "") or str((pod.get("status") or {}).get("reason") or "")


_PULL_NOT_FOUND = re.compile(
    r'(?:ErrImagePull|ImagePullBackOff).*code = NotFound.*failed to pull and unpack image "([^"]+)"'
)


def _missing_image(text: str) -> str:
    """One line for a pod whose image the registry does not have (the kubelet's
    ``ErrImagePull``/``ImagePullBackOff`` with containerd's ``NotFound``), or ``""``: retries
    cannot help (a registry that is down or refuses is another code, and is waited on)."""
    m = _PULL_NOT_FOUND.search(text)
    if m is None:
        return ""
    return (
        f"ErrImagePull: the image {m.group(1)} is not in its registry (not found); check "
        "--image or %ktrain config base_image. Its pods wait for it: delete the job"
    )


def _memory_limit(pod: Mapping[str, Any]) -> str:
    """The first container's memory limit as the pod spec says it (``128Mi``), or ``""``."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return str(((containers[0].get("resources") or {}).get("limits") or {}).get("memory", ""))


def _event_text(event: Mapping[str, Any] | None) -> str:
    if not event:
        return ""
    return f"{event.get('reason', '')}: {event.get('message', '')}".strip(": ")


def _ended(exit_code: int | None, reason: str) -> str:
    if exit_code is None:
        return restart_cause(exit_code, reason)
    why = " (its pod deleted, preempted or evicted)" if exit_code == 143 else ""
    return f"ended with {restart_cause(exit_code, reason)}{why}"


def _replica(
    pod_name: str,
    pod: Mapping[str, Any] | None,
    event: Any,
    recreations: int = 0,
    last_exit: tuple[int | None, str] | None = None,
    deleted: Mapping[str, Any] | None = None,
) -> ReplicaStatus:
    """One replica; ``recreations``: how often the operator made its pod anew (ExitCode
    deletes a failed pod and creates it again) and ``last_exit`` why the last instance ended:
    both count as restarts, as a container restart in place does. ``deleted``: its pod as last
    seen, when it was deleted (an ended job's, only)."""
    # the cause: how the pod's previous instance ended (a recreation), else the container's
    # previous run (a restart in place)
    cause = last_exit if recreations else None
    restarted = f"restarted after {restart_cause(*cause)}" if cause else "restarted"
    if pod is None and deleted is not None:
        return _deleted_replica(pod_name, deleted, recreations, restarted)
    if pod is None:
        text = _event_text(event) or (restarted if recreations else "")
        return ReplicaStatus(
            pod_name,
            NOT_CREATED,
            recreations,
            last_event=text,
            restart_cause=restarted if recreations else "",
        )
    cs = _container(pod)
    problem = pod_problem(dict(pod))
    shown = event if event and event.get("reason") in _EVENT_REASONS else None
    attempt = (pod.get("metadata") or {}).get("labels", {}).get(JOBSET_RESTARTS_LABEL, "0")
    in_place = cs.restart_count
    restarts = in_place + recreations + _int_or(attempt, 0)
    before = cs.previous
    if not cause and in_place and before is not None and before.exit_code is not None:
        restarted = f"restarted after {restart_cause(before.exit_code, before.reason)}"
    elif not cause and _int_or(attempt, 0):
        restarted = f"restarted with every other pod by its JobSet (attempt {attempt})"
    return ReplicaStatus(
        name=pod_name,
        phase=ReplicaPhase(pod_phase(pod, "Pending")),
        restarts=restarts,
        node=(pod.get("spec") or {}).get("nodeName", ""),
        exit_code=_exit_code(pod),
        last_event=problem
        or _event_text(shown)
        or (restarted if restarts else "")
        or _event_text(event),
        restart_cause=restarted if restarts else "",
    )


NOT_CREATED = ReplicaPhase.NOT_CREATED  # a replica with no pod (not yet, or never seen)


def _deleted_replica(
    name: str, pod: Mapping[str, Any], recreations: int, restarted: str
) -> ReplicaStatus:
    """A replica whose pod is gone: as it was last seen. One deleted while it still ran (the
    operator's clean-up of a job that ended, cleanPodPolicy Running) reads ``Deleted``; its
    ranks' own exit records may say more (:func:`jupyter_ktrain.jobs.complete_exit_codes`)."""
    phase = pod_phase(pod)
    ended = phase in (SUCCEEDED, FAILED)
    return ReplicaStatus(
        name,
        ReplicaPhase(phase) if ended else ReplicaPhase.DELETED,
        recreations,
        node=(pod.get("spec") or {}).get("nodeName", ""),
        exit_code=_exit_code(pod),
        last_event=DELETED_AFTER_END if ended else DELETED_WHILE_RUNNING,
        restart_cause=restarted if recreations else "",
        deleted=True,
    )


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def build_status(
    job: Mapping[str, Any],
    pods: Mapping[str, Mapping[str, Any]],
    events: Mapping[str, Mapping[str, Any]],
    exits: Mapping[int, tuple[int, int]],
    tails: Mapping[int, Sequence[str]],
    recreated: Mapping[str, float] | None = None,
    last_progress: float | None = None,
    now: float | None = None,
    *,
    progress: Progress | None = None,
    recreations: Mapping[str, int] | None = None,
    last_exits: Mapping[str, tuple[int | None, str]] | None = None,
    workload: Mapping[str, Any] | None = None,
    queue_position: int | None = None,
    deleted: Mapping[str, Mapping[str, Any]] | None = None,
) -> JobStatus:
    """``exits``: rank -> (timestamp ns, exit code) from ``exit`` records; ``tails``: rank ->
    its last lines; ``recreated``: pod -> when it came back with a new uid; ``last_progress``:
    when any rank last printed; ``progress``: what the logs said of it (else a TrainJob's
    ``status.trainerStatus``, when the Trainer's progress feature filled it); ``workload``:
    the job's Kueue Workload, when it was submitted to a queue (a job Kueue has not admitted
    yet, or evicted and requeued, is ``Queued`` with Kueue's reason)."""
    name = job["metadata"]["name"]
    state, reason, message = queued_state(job, workload, queue_position)
    queue = queue_info(workload) if workload else None
    placed = describe_domains(assigned_domains(workload)) if workload else ""
    names = replica_pods(job) or sorted(pods)
    again, ended = recreations or {}, last_exits or {}
    # a pod deleted once the job ended is shown as last seen; while the job runs, a deleted
    # pod is one the operator makes anew (its restart says so)
    was = (deleted or {}) if state in TERMINAL_STATES else {}
    replicas = tuple(
        _replica(n, pods.get(n), events.get(n), again.get(n, 0), ended.get(n), was.get(n))
        for n in names
    )
    per_node = nproc(job)
    codes = {rank: code for rank, (_ts, code) in exits.items()}
    failed_rank = _first_failed(exits, names, pods, per_node)
    if state == FAILED and failed_rank is not None:
        pod = names[failed_rank // per_node] if failed_rank // per_node < len(names) else ""
        p = pods.get(pod) or {}
        failure = classify(
            list(tails.get(failed_rank, ())), _exit_code(p), _term_reason(p), _memory_limit(p)
        )
        gave_up = "backoff limit" in message
        reason = failure.kind
        message = f"rank {failed_rank} ({pod}) failed first: {failure.explanation}"
        if gave_up:
            total = sum(r.restarts for r in replicas)
            message = f"gave up after {total} restart(s), the limit (--max-restarts); {message}"
        codes.setdefault(failed_rank, _exit_code(p) or 1)
    elif state == FAILED:  # no rank reported: say how the replicas' containers ended
        gone = [f"{n} {_ended(*ended[n])}" for n in names if ended.get(n, (0, ""))[0] != 0]
        message = f"{message.rstrip('.')}: {'; '.join(gone)}." if gone else message
    elif state == PENDING:
        stuck = next((r for r in replicas if r.last_event), None)
        if stuck is not None:
            reason, message = stuck.last_event.split(":", 1)[0], f"{stuck.name}: {stuck.last_event}"
            missing = _missing_image(stuck.last_event)
            if missing:  # no retry will find it: the job has failed, though its pods wait
                state, reason = FAILED, "ImageNotFound"
                message = f"{stuck.name}: {missing} (%ktrain delete {name})"
        elif not pods:
            ev = events.get(name)
            reason = reason or ("" if ev is None else str(ev.get("reason", "")))
    if state == RUNNING and recreated:
        reason, message = _stalled(recreated, last_progress, now) or (reason, message)
    status = job.get("status") or {}
    return JobStatus(
        name=name,
        state=state,
        reason=reason,
        message=message,
        exit_codes=codes,
        replicas=replicas,
        started=_timestamp(status.get("startTime")),
        finished=_timestamp(status.get("completionTime")),
        failed_rank=failed_rank if state == FAILED else None,
        progress=progress or trainer_progress(status.get("trainerStatus")),
        max_restarts=_max_restarts(job),
        evictions=queue.evictions if queue is not None else (),
        dashboard=_dashboard(status),
        admitted_by=f"ClusterQueue {queue.cluster_queue!r}" + (f" ({placed})" if placed else "")
        if queue is not None and queue.admitted and queue.cluster_queue
        else "",
    )


def _max_restarts(job: Mapping[str, Any]) -> int | None:
    """The job's fault restarts limit: its runPolicy's backoffLimit, or (a TrainJob, whose
    limit is its runtime's JobSet failure policy) the annotation ktrain puts on it."""
    limit = ((job.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")
    if limit is None:
        limit = ((job.get("metadata") or {}).get("annotations") or {}).get(MAX_RESTARTS_ANNOTATION)
    return _int(limit)


def trainer_progress(trainer_status: Any) -> Progress | None:
    """A TrainJob's ``status.trainerStatus`` (Kubeflow Trainer v2.2+, ``TrainJobStatus``
    feature gate) as a :class:`Progress`: percent as step of 100, unless the metrics carry
    ``current_step``/``total_steps`` (Transformers' and our reporters send them)."""
    if not isinstance(trainer_status, Mapping):
        return None
    pct = trainer_status.get("progressPercentage")
    metrics = {
        str(m.get("name")): m.get("value")
        for m in trainer_status.get("metrics") or []
        if isinstance(m, Mapping)
    }
    # current_step and the percentage count steps done; a Progress's step is the last one
    # done, counted from 0
    done, total = _int(metrics.get("current_step")), _int(metrics.get("total_steps"))
    if done is None or not total:
        if not isinstance(pct, int):
            return None
        done, total = pct, 100
    step = done - 1
    eta = trainer_status.get("estimatedRemainingSeconds")
    when = _timestamp(trainer_status.get("lastUpdatedTime")) or 0.0
    return Progress(step, total, when, float(eta) if isinstance(eta, int) else None)


def _int(value: Any) -> int | None:
    try:
        return int(float(str(value)))
    except ValueError:
        return None


def _first_failed(
    exits: Mapping[int, tuple[int, int]],
    names: Sequence[str],
    pods: Mapping[str, Mapping[str, Any]],
    per_node: int,
) -> int | None:
    # a rank that lost a peer (PEER_LOST) failed because another one ended: it is the first
    # failure only when nothing else tells who ended first
    bad = sorted((ts, rank) for rank, (ts, code) in exits.items() if code not in (0, PEER_LOST))
    if bad:
        return bad[0][1]
    lost = sorted((ts, rank) for rank, (ts, code) in exits.items() if code == PEER_LOST)
    failed = []
    for i, n in enumerate(names):
        pod = pods.get(n)
        code = _exit_code(pod) if pod else None
        term = _terminated(pod) if code and pod else None
        if term is not None:
            failed.append((term.finished_at, i))
    if failed:
        return min(failed)[1] * per_node
    return lost[0][1] if lost else None


def _stalled(
    recreated: Mapping[str, float], last_progress: float | None, now: float | None
) -> tuple[str, str] | None:
    import time

    now = time.time() if now is None else now
    pod, when = max(recreated.items(), key=lambda kv: kv[1])
    quiet_since = max(when, last_progress or 0.0)
    if now - quiet_since < STALL_S:
        return None
    return (
        "WorkerNotRejoined",
        f"pod {pod} was deleted and came back {now - when:.0f} s ago, and no rank has printed "
        f"anything since: it has not rejoined the others (a known Training Operator hang). "
        f"Cancel and resubmit the job.",
    )


def job_shape(job: Mapping[str, Any]) -> JobShape:
    """The shape a kubeflow.org/v1 job was created with (what ``%ktrain attach`` shows):
    replicas over all replica types, processes per node, GPUs per replica."""
    spec = job.get("spec") or {}
    nodes = len(replica_pods(job)) or 1
    gpus = 0
    kind = job_kind(str(job.get("kind") or ""))
    if kind is not None and kind.replica_key:
        for replica in (spec.get(kind.replica_key) or {}).values():
            pod = ((replica or {}).get("template") or {}).get("spec") or {}
            for c in pod.get("containers") or []:
                limits = (c.get("resources") or {}).get("limits") or {}
                gpus = max(gpus, _int_or(limits.get("nvidia.com/gpu"), 0))
    nproc = _int_or(spec.get("nprocPerNode"), gpus or 1)
    return JobShape(kind=str(job.get("kind") or DEFAULT_KIND), nodes=nodes,
                    procs_per_node=nproc, gpus_per_node=gpus)  # fmt: skip


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
