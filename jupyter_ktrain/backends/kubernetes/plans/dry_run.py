"""The plan of a cluster job (``dryrun``): the objects ``schedule`` creates, rendered and
validated once (:func:`.plan.render_request`; the text is their YAML, ConfigMap data
summarised), with what the cluster context settles first: the namespace, the image of a job
that names none, the configured Kueue queue, whether a ServiceMonitor is served, a TrainJob's
own TrainingRuntime (:mod:`.fault_runtime`). A ``--warm`` cell whose warm job is up is planned
as a run on it (:class:`~.warm_backend.WarmJobs`)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ....errors import ClusterError, PreflightError, SpecError
from ....kinds import KIND_TABLE
from ...base import LaunchPlan
from ...warm_shape import check_warm
from ..client.kube_api import in_cluster
from ..client.resources import CLUSTER_TRAINING_RUNTIME, POD, TRAINING_RUNTIME
from ..client.retries import Forbidden
from ..cluster import BACKEND_NAME, Cluster
from ..warm.runs import WarmJobs
from .fault_runtime import use_fault_runtime
from .plan import KubernetesRequest, describe, render_request
from .preflight import Access, may, serves_service_monitors
from .topology_check import check_topology

if TYPE_CHECKING:
    from ....capture import CapturedProgram
    from ....spec.job import JobSpec

__all__ = ["Planner"]


class Planner:
    """Plans jobs for the ``cluster`` context; a warm cell's through ``warm``."""

    def __init__(self, cluster: Cluster, warm: WarmJobs) -> None:
        self.cluster = cluster
        self.warm = warm

    def dryrun(self, spec: JobSpec, program: CapturedProgram) -> LaunchPlan[KubernetesRequest]:
        """The request, rendered once: ``schedule`` creates exactly these objects (on the
        registry route, with the pushed image's digest in place of the placeholder)."""
        if spec.kind not in KIND_TABLE:
            raise SpecError(f"--kind {spec.kind} is not supported by the kubernetes backend.")
        cluster = self.cluster
        notes: tuple[str, ...] = ()
        if spec.warm:
            check_warm(spec)
            spec = self._default_image(spec)
            spec, found, notes = self.warm.target(
                spec.evolve(namespace=cluster.namespace_for(spec))
            )
            if found is not None:
                return self.warm.run_plan(spec, program, found)
        try:
            spec = spec.evolve(namespace=cluster.namespace_for(spec))
        except ClusterError as exc:  # a dry run renders without a cluster (e.g. for git)
            spec = spec.evolve(namespace="default")
            notes = (f"no cluster configured ({exc}); namespace shown as 'default'",)
        spec = self._default_image(spec)
        offline = bool(notes)
        spec, notes = self._default_queue(spec, notes)
        spec = self._default_topology(spec)
        spec, checked = check_topology(self._topology_api(spec, offline), spec)
        monitor, notes = self._service_monitor(spec, notes)
        registry = cluster.config.registry or None
        request, files = render_request(spec, program, registry=registry, service_monitor=monitor)
        if KIND_TABLE[spec.kind].trainer_runtime and not notes:
            request, notes = self._fault_runtime(request, spec)
        notes = (*notes, *checked)
        text = describe(request)
        return LaunchPlan(spec, program, BACKEND_NAME, request, text, files, notes)

    def _topology_api(self, spec: JobSpec, offline: bool) -> Any:
        """The API that checks a ``--topology`` level against the queue's Topology; None where
        nothing asks for one or no cluster is there to read (a dry run renders without one: a
        job whose namespace is given never touched the cluster before this)."""
        if offline or spec.scheduling.placement is None:
            return None
        try:
            return self.cluster.api
        except ClusterError:
            return None

    def _default_image(self, spec: JobSpec) -> JobSpec:
        """The image of a job that names none: ``%ktrain config base_image``, else, in a pod
        (a Kubeflow notebook), the image the notebook itself runs on (its libraries are what
        the cell was written against); else none (the render says to pass --image)."""
        config = self.cluster.config
        image = spec.image or config.base_image or (in_cluster() and self._own_image())
        return spec.evolve(image=image) if image and image != spec.image else spec

    def _own_image(self) -> str | None:
        """The first container's image of this process's own pod (``$HOSTNAME`` in the pod's
        namespace), or None where it cannot be read."""
        pod = os.environ.get("HOSTNAME", "")
        api = self.cluster.api
        try:
            got = api.get(POD.path(api.namespace, pod)) if pod else {}
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
        queue, s = self.cluster.config.kueue_queue, spec.scheduling
        if not queue or s.kueue_queue or s.gang is not None:
            return spec, notes
        ignores = KIND_TABLE[spec.kind].kueue_ignores
        if ignores:
            why = f"Kueue does not manage {spec.kind} ({ignores}): it runs unqueued"
            return spec, (*notes, f"config kueue_queue={queue} not applied: {why}")
        return spec.evolve(scheduling=replace(s, kueue_queue=queue)), notes

    def _default_topology(self, spec: JobSpec) -> JobSpec:
        """The configured topology level (``%ktrain config topology=...``) for a job Kueue
        queues that names none."""
        level, s = self.cluster.config.topology, spec.scheduling
        if not level or not s.kueue_queue or s.placement is not None:
            return spec
        if KIND_TABLE[spec.kind].kueue_ignores:
            return spec
        try:
            return spec.evolve(scheduling=replace(s, topology=level))
        except SpecError as exc:  # the job's flags are fine: the saved default is not
            raise SpecError(f"%ktrain config topology={level}: {exc}") from None

    def _fault_runtime(
        self, request: KubernetesRequest, spec: JobSpec
    ) -> tuple[KubernetesRequest, tuple[str, ...]]:
        """A TrainJob runs on a TrainingRuntime of its own, derived from its
        ClusterTrainingRuntime with the failure policy of every other kind
        (:func:`.fault_runtime.fault_runtime`); where the cluster runtime cannot be read
        (RBAC), on it as it is, with a note saying what that means."""
        as_it_is = (
            f"the TrainJob uses ClusterTrainingRuntime {spec.runtime!r} as it is: its JobSet "
            "restarts a raising rank in place (up to its Job's backoffLimit) instead of failing "
            "at once"
        )
        api = self.cluster.api
        try:
            cluster_runtime = api.find(CLUSTER_TRAINING_RUNTIME.path(name=spec.runtime))
        except Forbidden:
            return request, (f"cannot read it (RBAC): {as_it_is}",)
        if cluster_runtime is None:
            raise PreflightError(
                [
                    f"ClusterTrainingRuntime {spec.runtime!r} does not exist: pick one of "
                    "`kubectl get clustertrainingruntimes` with --runtime, or ask an admin "
                    "to install Trainer's runtimes."
                ]
            )
        group, plural = TRAINING_RUNTIME.group, TRAINING_RUNTIME.plural
        wanted = (Access("create", plural, group), Access("patch", plural, group))
        if not may(api, request.namespace, *wanted):
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
        return serves_service_monitors(self.cluster.api), notes
