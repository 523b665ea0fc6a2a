"""The Kubeflow Training Operator (kubeflow.org/v1 PyTorchJob, TFJob, MPIJob) as a controller.

Reconciles each job into pods and headless Services named ``NAME-{replica type}-{index}`` with
the operator's labels, env (see ``replicas.py``) and owner references; keeps ``status``
(conditions Created/Running/Restarting/Succeeded/Failed, each new one appended last,
replicaStatuses, startTime, completionTime); applies restartPolicy (ExitCode: a pod that
failed with a retryable exit code, >= 128, is deleted and recreated), backoffLimit (container
restarts summed), cleanPodPolicy and ttlSecondsAfterFinished.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
from datetime import datetime, timezone
from typing import Any

from . import replicas as R
from .api import Api
from .errors import ApiError
from .store import Store, emit_event, now

LABEL = "training.kubeflow.org/"


def _age(ts: str) -> float:
    t = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return time.time() - t.timestamp()


def set_condition(status: dict[str, Any], typ: str, reason: str, message: str) -> bool:
    """The operator's setCondition: returns False when the latest condition is already this."""
    conds = status.get("conditions") or []
    cur = next((c for c in conds if c["type"] == typ), None)
    if cur and cur["status"] == "True" and cur["reason"] == reason:
        return False
    out = []
    for c in conds:
        if c["type"] == typ or {typ, c["type"]} == {"Running", "Restarting"}:
            continue
        if typ in ("Succeeded", "Failed") and c["type"] == "Running":
            c = {**c, "status": "False"}
        out.append(c)
    ts = now()
    out.append(
        {
            "type": typ,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastUpdateTime": ts,
            "lastTransitionTime": ts,
        }
    )
    status["conditions"] = out
    return True


def finished(status: dict[str, Any]) -> bool:
    return any(
        c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
        for c in status.get("conditions") or []
    )


class Operator(threading.Thread):
    def __init__(self, store: Store, api: Api, resync: float = 1.0) -> None:
        super().__init__(daemon=True, name="training-operator")
        self.store = store
        self.resync = resync
        self.pods = store.registry.by_plural("pods")
        self.services = store.registry.by_plural("services")
        self.configmaps = store.registry.by_plural("configmaps")
        self.resources = {p: store.registry.by_plural(p, "kubeflow.org") for p in R.KINDS}
        for plural, res in self.resources.items():
            api.mutators.setdefault(res.key, []).append(
                lambda obj, k=R.KINDS[plural]: R.apply_defaults(k, obj)
            )
        self._events = store.subscribe()
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            todo: set[tuple[str, str, str]] = set()
            try:
                ev = self._events.get(timeout=0.2)
                todo |= self._keys(ev)
                while not self._events.empty():
                    todo |= self._keys(self._events.get_nowait())
            except queue.Empty:
                pass
            if time.monotonic() - last >= self.resync:
                last = time.monotonic()
                for plural, res in self.resources.items():
                    for job in self.store.list(res, None)[0]:
                        todo.add((plural, job["metadata"]["namespace"], job["metadata"]["name"]))
            for key in sorted(todo):
                # an ApiError is a race with a delete or a user update; the next pass fixes it
                with contextlib.suppress(ApiError):
                    self.reconcile(*key)

    def _keys(self, ev: tuple[int, str, str, dict[str, Any]]) -> set[tuple[str, str, str]]:
        _, key, typ, obj = ev
        group, plural = key.split("/", 1)
        if group == "kubeflow.org" and plural in R.KINDS and typ != "DELETED":
            return {(plural, obj["metadata"]["namespace"], obj["metadata"]["name"])}
        if key == "/pods":
            for ref in obj["metadata"].get("ownerReferences") or []:
                for plural_, k in R.KINDS.items():
                    if ref.get("kind") == k.kind:
                        return {(plural_, obj["metadata"]["namespace"], ref["name"])}
        return set()

    # -- reconcile --------------------------------------------------------------------------

    def reconcile(self, plural: str, ns: str, name: str) -> None:
        kind, res = R.KINDS[plural], self.resources[plural]
        job = self.store.try_get(res, ns, name)
        if job is None:
            return
        status = copy.deepcopy(job.get("status") or {})
        pods = self._pods(job)
        if finished(status):
            self._cleanup(kind, job, status, pods)
            status["replicaStatuses"] = self._counts(kind, job, pods)
            self._write_status(plural, ns, name, status)
            return
        if set_condition(
            status, "Created", f"{kind.kind}Created", f"{kind.kind} {name} is created."
        ):
            emit_event(
                self.store,
                job,
                f"{kind.kind}Created",
                f"{kind.kind} {name} is created.",
                component=kind.controller,
            )
        status.setdefault("startTime", now())
        if plural == "mpijobs":
            self._ensure_configmap(job)
        restarting: list[str] = []
        failed: dict[str, int] = {}
        counts: dict[str, dict[str, int]] = {}
        for rt, rspec in R.replica_types(kind, job):
            n = int(rspec.get("replicas", 1))
            c = counts.setdefault(rt, {"active": 0, "succeeded": 0, "failed": 0})
            for i in range(n):
                pname = R.pod_name(name, rt, i)
                pod = pods.get(pname)
                if plural != "mpijobs" or rt == "Worker":
                    self._ensure_service(kind, job, rt, i, rspec)
                if pod is None:
                    if rt != "Launcher" or self._workers_running(job, pods):
                        self._create_pod(kind, job, rt, i, rspec)
                    continue
                phase = pod.get("status", {}).get("phase")
                if phase == "Running":
                    c["active"] += 1
                elif phase == "Succeeded":
                    c["succeeded"] += 1
                elif phase == "Failed":
                    if (
                        rspec.get("restartPolicy") == "ExitCode"
                        and self._exit_code(kind, pod) >= 128
                    ):
                        self.store.delete(self.pods, ns, pname)
                        restarting.append(rt)
                    else:
                        c["failed"] += 1
                        failed[rt] = failed.get(rt, 0) + 1
        status["replicaStatuses"] = {
            rt: {k: v for k, v in c.items() if v} for rt, c in counts.items()
        }
        self._conditions(kind, job, status, counts, failed, restarting, pods)
        self._write_status(plural, ns, name, status)

    def _conditions(
        self,
        kind: R.Kind,
        job: dict[str, Any],
        status: dict[str, Any],
        counts: dict[str, dict[str, int]],
        failed: dict[str, int],
        restarting: list[str],
        pods: dict[str, dict[str, Any]],
    ) -> None:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        spec = job["spec"]
        specs = spec.get(kind.specs_key) or {}
        backoff = (spec.get("runPolicy") or {}).get("backoffLimit")
        restarts = sum(
            cs.get("restartCount", 0)
            for p in pods.values()
            if p["spec"].get("restartPolicy") in ("OnFailure", "Always")
            for cs in p.get("status", {}).get("containerStatuses") or []
        )
        changes: list[tuple[str, str, str]] = []
        if backoff is not None and restarts > backoff:
            changes.append(
                (
                    "Failed",
                    f"{kind.kind}Failed",
                    f"{kind.kind} {name} has failed because it has reached the specified "
                    "backoff limit",
                )
            )
        elif failed:
            rt, n = next(iter(failed.items()))
            changes.append(
                (
                    "Failed",
                    f"{kind.kind}Failed",
                    f"{kind.kind} {ns}/{name} has failed because {n} {rt} replica(s) failed.",
                )
            )
        elif restarting:
            changes.append(
                (
                    "Restarting",
                    f"{kind.kind}Restarting",
                    f"{kind.kind} {ns}/{name} is restarting because {len(restarting)} "
                    f"{restarting[0]} replica(s) failed.",
                )
            )
        else:
            lead = kind.master if kind.master in specs else "Worker"
            c = counts.get(lead, {})
            n = int((specs.get(lead) or {}).get("replicas", 1))
            worker0 = pods.get(R.pod_name(name, "Worker", 0), {}).get("status", {}).get("phase")
            done = c.get("succeeded", 0) >= n or (lead == "Worker" and worker0 == "Succeeded")
            if done:
                changes.append(
                    (
                        "Succeeded",
                        f"{kind.kind}Succeeded",
                        f"{kind.kind} {ns}/{name} successfully completed.",
                    )
                )
            elif any(c_.get("active") for c_ in counts.values()):
                changes.append(
                    ("Running", f"{kind.kind}Running", f"{kind.kind} {ns}/{name} is running.")
                )
        for typ, reason, msg in changes:
            if set_condition(status, typ, reason, msg):
                emit_event(
                    self.store,
                    job,
                    reason,
                    msg,
                    "Warning" if typ in ("Failed", "Restarting") else "Normal",
                    kind.controller,
                )
            if typ in ("Succeeded", "Failed"):
                status["completionTime"] = now()

    def _write_status(self, plural: str, ns: str, name: str, status: dict[str, Any]) -> None:
        def fn(obj: dict[str, Any]) -> None:
            obj["status"] = status

        self.store.mutate(self.resources[plural], ns, name, fn, "status")

    @staticmethod
    def _counts(
        kind: R.Kind, job: dict[str, Any], pods: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, int]]:
        phases = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}
        out: dict[str, dict[str, int]] = {}
        for rt, rspec in R.replica_types(kind, job):
            c: dict[str, int] = {}
            for i in range(int(rspec.get("replicas", 1))):
                pod = pods.get(R.pod_name(job["metadata"]["name"], rt, i)) or {}
                key = phases.get(pod.get("status", {}).get("phase", ""))
                if key:
                    c[key] = c.get(key, 0) + 1
            out[rt] = c
        return out

    @staticmethod
    def _workers_running(job: dict[str, Any], pods: dict[str, dict[str, Any]]) -> bool:
        """MPIJob: the launcher starts once every worker runs (as its init container waits)."""
        spec = job["spec"]["mpiReplicaSpecs"].get("Worker") or {}
        names = [
            R.pod_name(job["metadata"]["name"], "Worker", i)
            for i in range(int(spec.get("replicas", 0)))
        ]
        return all(pods.get(n, {}).get("status", {}).get("phase") == "Running" for n in names)

    @staticmethod
    def _exit_code(kind: R.Kind, pod: dict[str, Any]) -> int:
        for cs in pod.get("status", {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if term and (cs["name"] == kind.container or len(pod["spec"]["containers"]) == 1):
                return int(term.get("exitCode", 0))
        return 0

    # -- children ---------------------------------------------------------------------------

    def _pods(self, job: dict[str, Any]) -> dict[str, dict[str, Any]]:
        uid = job["metadata"]["uid"]
        items = self.store.list(self.pods, job["metadata"]["namespace"])[0]
        return {
            p["metadata"]["name"]: p
            for p in items
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
        }

    @staticmethod
    def _owner(job: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "apiVersion": job["apiVersion"],
                "kind": job["kind"],
                "name": job["metadata"]["name"],
                "uid": job["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]

    def _labels(self, kind: R.Kind, job: dict[str, Any], rt: str, i: int) -> dict[str, str]:
        labels = {
            f"{LABEL}job-name": job["metadata"]["name"],
            f"{LABEL}operator-name": kind.controller,
            f"{LABEL}replica-type": rt.lower(),
            f"{LABEL}replica-index": str(i),
        }
        if rt == kind.master:
            labels[f"{LABEL}job-role"] = "master"
        return labels

    def _create_pod(
        self, kind: R.Kind, job: dict[str, Any], rt: str, i: int, rspec: dict[str, Any]
    ) -> None:
        template = copy.deepcopy(rspec.get("template") or {})
        meta = template.get("metadata") or {}
        name = R.pod_name(job["metadata"]["name"], rt, i)
        spec = template.get("spec") or {}
        policy = rspec.get("restartPolicy", kind.default_restart)
        spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
        extra = R.ENV[kind.plural](job, rt, i)
        for c in spec.get("containers") or []:
            c["env"] = list(c.get("env") or []) + copy.deepcopy(extra)
        if kind.plural == "mpijobs":
            self._mpi_pod(job, rt, spec)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": job["metadata"]["namespace"],
                "labels": {**(meta.get("labels") or {}), **self._labels(kind, job, rt, i)},
                "annotations": dict(meta.get("annotations") or {}),
                "ownerReferences": self._owner(job),
            },
            "spec": spec,
        }
        from .defaults import pod as pod_defaults

        pod_defaults(pod)
        try:
            created = self.store.create(self.pods, job["metadata"]["namespace"], pod)
        except ApiError as exc:
            emit_event(self.store, job, "FailedCreatePod", exc.message, "Warning", kind.controller)
            return
        emit_event(
            self.store,
            job,
            "SuccessfulCreatePod",
            f"Created pod: {created['metadata']['name']}",
            component=kind.controller,
        )

    @staticmethod
    def _mpi_pod(job: dict[str, Any], rt: str, spec: dict[str, Any]) -> None:
        if rt == "Launcher":
            spec.setdefault("volumes", []).append(
                {
                    "name": "mpi-job-config",
                    "configMap": {
                        "name": f"{job['metadata']['name']}-config",
                        "items": [
                            {"key": k, "path": k, "mode": 0o555}
                            for k in ("kubexec.sh", "hostfile", "discover_hosts.sh")
                        ],
                    },
                }
            )
            for c in spec.get("containers") or []:
                c.setdefault("volumeMounts", []).append(
                    {"name": "mpi-job-config", "mountPath": "/etc/mpi"}
                )
        else:
            for c in spec.get("containers") or []:
                if not c.get("command"):
                    c["command"], c["args"] = ["sleep"], ["365d"]

    def _ensure_service(
        self, kind: R.Kind, job: dict[str, Any], rt: str, i: int, rspec: dict[str, Any]
    ) -> None:
        ns = job["metadata"]["namespace"]
        name = R.pod_name(job["metadata"]["name"], rt, i)
        if self.store.try_get(self.services, ns, name) is not None:
            return
        port = R.port_of(kind, rspec)
        labels = self._labels(kind, job, rt, i)
        svc: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": labels,
                "ownerReferences": self._owner(job),
            },
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": kind.port_name, "port": port}] if port else [],
            },
        }
        from .defaults import service

        service(svc)
        try:
            self.store.create(self.services, ns, svc)
        except ApiError:
            return
        emit_event(
            self.store,
            job,
            "SuccessfulCreateService",
            f"Created service: {name}",
            component=kind.controller,
        )

    def _ensure_configmap(self, job: dict[str, Any]) -> None:
        ns = job["metadata"]["namespace"]
        name = f"{job['metadata']['name']}-config"
        if self.store.try_get(self.configmaps, ns, name) is not None:
            return
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": ns,
                "ownerReferences": self._owner(job),
                "labels": {"app": job["metadata"]["name"]},
            },
            "data": R.mpi_config(job),
        }
        with contextlib.suppress(ApiError):
            self.store.create(self.configmaps, ns, cm)

    def _cleanup(
        self,
        kind: R.Kind,
        job: dict[str, Any],
        status: dict[str, Any],
        pods: dict[str, dict[str, Any]],
    ) -> None:
        ns = job["metadata"]["namespace"]
        run_policy = job["spec"].get("runPolicy") or {}
        policy = run_policy.get("cleanPodPolicy", "None")
        for pname, pod in pods.items():
            active = pod.get("status", {}).get("phase") in ("Pending", "Running")
            if policy == "All" or (policy == "Running" and active):
                for res in (self.pods, self.services):
                    with contextlib.suppress(ApiError):
                        self.store.delete(res, ns, pname)
        ttl = run_policy.get("ttlSecondsAfterFinished")
        done_at = status.get("completionTime")
        if ttl is not None and done_at and _age(done_at) >= ttl:
            with contextlib.suppress(ApiError):
                self.store.delete(self.resources[kind.plural], ns, job["metadata"]["name"])
