"""Starting a planned cluster job (:class:`~.plan.KubernetesRequest`): the preflight, the code
image pushed (registry route) and pinned by digest into a new plan, then the planned objects
created all-or-nothing, the job last, and made their owner; if creating the job fails, what
was made is deleted. A run on a live warm job is ordered by :class:`~.warm_backend.WarmJobs`
instead."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ...errors import SpecError
from ...kinds import KIND_TABLE
from ...store.warm_ledger import remember
from ..base import LaunchPlan
from ..warm_shape import warm_shape
from .client.resources import job_resource
from .cluster import Cluster
from .lookup import remember_kind, watch
from .objects import create, delete_one, own
from .plans.plan import KubernetesRequest, kind_and_name
from .plans.preflight import run_preflight
from .status.cluster_history import ClusterHistory

if TYPE_CHECKING:
    from .multikueue import Workers

__all__ = ["Submitter"]


class Submitter:
    """Creates planned jobs in the ``cluster`` context; a new job's name starts a new
    ``history``."""

    def __init__(
        self, cluster: Cluster, history: ClusterHistory, workers: Workers | None = None
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.workers = workers  # MultiKueue: the worker clusters a job may run on

    def start(self, made: LaunchPlan[KubernetesRequest]) -> LaunchPlan[KubernetesRequest]:
        """Preflight, push the code image (registry route), then create the planned objects,
        all-or-nothing; the plan as started (with the image digest)."""
        cluster = self.cluster
        spec, request = made.spec, made.request
        ns = request.namespace
        warnings = run_preflight(
            cluster.api,
            spec,
            ns,
            configmap=request.route == "configmap",
            service="Service" in request.kinds,
            service_monitor="ServiceMonitor" in request.kinds,
        )
        for w in warnings:
            cluster.say(f"warning: {w}")
        if cluster.api.exists(job_resource(KIND_TABLE[spec.kind]).path(ns, spec.name)):
            raise SpecError(
                f"A {spec.kind} named {spec.name!r} already exists in {ns!r}. Pick another "
                f"--name, or remove it with `%ktrain delete {spec.name}`."
            )
        # MultiKueue: the workers it may be dispatched to, checked before anything is made
        workers = self.workers.targets(spec) if self.workers is not None else []
        if request.route == "registry":
            made = replace(made, request=self._push(made))
        *owned, job_object = made.request.objects
        created: list[tuple[Cluster, str, str]] = []
        try:
            # Kueue copies only the job to the worker: what it runs beside is made there too
            # (owned there by the worker's job once it is seen: multikueue.Workers)
            for where in [cluster, *(backend.cluster for _name, backend in workers)]:
                for obj in owned:
                    create(where, obj, ns)
                    created.append((where, *kind_and_name(obj)))
            job = create(cluster, job_object, ns)
            own(cluster, job, [(k, n) for c, k, n in created if c is cluster], ns)
        except Exception:
            for where, kind, name in created:
                delete_one(where, kind, name, ns)
            raise
        remember_kind(cluster, spec.name, spec.kind)
        self.history.started(spec.name)
        watch(cluster, spec.name)
        if spec.warm:
            remember(ns, spec.name, warm_shape(spec))
        return made

    def _push(self, plan: LaunchPlan[KubernetesRequest]) -> KubernetesRequest:
        """Push the code image; the plan's request with its reference pinned by digest."""
        from ...packaging.push import push_code_image
        from ...packaging.push_progress import auto_progress

        spec, program, cfg = plan.spec, plan.program, self.cluster.config
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
        self.cluster.say(result.message())
        return plan.request.pinned(result.reference, result.digest)
