"""What a Kubernetes submit creates: :class:`KubernetesRequest`, rendered once per submit.

Pure: a spec and a captured program in, the objects out (no cluster). ``dryrun`` calls
:func:`render_request` once; ``schedule`` creates exactly these objects. On the registry
route the code image is pushed at submit, so the objects name a placeholder digest until then
and :meth:`KubernetesRequest.pinned` makes the request with the pushed image (a new request:
nothing is rendered again, nothing changed in place).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, cast

from ....pod.launch import LIB_DIR
from ..labels import SHAPE_ANNOTATION, WARM_LABEL
from .podtemplate import CodeSource, job_labels

if TYPE_CHECKING:
    from ....capture import CapturedProgram
    from ....spec.job import JobSpec

__all__ = [
    "PLACEHOLDER_DIGEST",
    "KubernetesRequest",
    "Manifest",
    "Route",
    "cell_id",
    "describe",
    "kind_and_name",
    "render_request",
]

#: how the code reaches the pods: a code image pushed to the registry, or a ConfigMap
Route = Literal["registry", "configmap"]
#: one Kubernetes object as JSON (read here, never changed)
Manifest = Mapping[str, object]
#: the digest the objects name until the code image is pushed (what --dry-run shows)
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


@dataclass(frozen=True)
class KubernetesRequest:
    """The objects to create in ``namespace``, in order (the job last, the others owned by
    it). ``route`` says how the code travels: ``configmap`` (the first object), or
    ``registry``: a code image pushed at submit, named ``image`` in the objects (a placeholder
    digest until :meth:`pinned`); ``image_digest`` once it is pushed."""

    namespace: str
    route: Route
    objects: tuple[Manifest, ...]
    image: str | None = None
    image_digest: str | None = None
    # a run on a live warm job: ``objects`` is only its new code ConfigMap (the data to put)
    reuse: bool = False

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(kind_and_name(o)[0] for o in self.objects)

    def pinned(self, reference: str, digest: str) -> KubernetesRequest:
        """This request with the pushed code image ``reference`` (``repo@sha256:...``) in
        place of the placeholder wherever the objects name it."""
        placeholder = self.image
        objects = tuple(_swap(o, placeholder, reference) for o in self.objects)
        return replace(self, objects=objects, image=reference, image_digest=digest)


def _swap(obj: Manifest, old: str | None, new: str) -> Manifest:
    def walk(value: object) -> object:
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return new if value == old else value

    return {k: walk(v) for k, v in obj.items()}


def kind_and_name(obj: Manifest) -> tuple[str, str]:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return str(obj.get("kind") or ""), str(name or "")


def cell_id(program: CapturedProgram) -> str:
    """The ``ktrain.io/cell`` label: which cell made the job."""
    return hashlib.sha256(program.cell.encode()).hexdigest()[:12]


def render_request(
    spec: JobSpec,
    program: CapturedProgram,
    *,
    registry: str | None,
    service_monitor: bool,
) -> tuple[KubernetesRequest, dict[str, bytes]]:
    """The request for ``spec`` (its namespace set) and every file shipped with the code,
    rendered and validated once. ``registry``: the code image's repository (registry route),
    else None (ConfigMap route)."""
    from ....packaging.configmap import code_volume, render_code_configmap
    from .manifests import job_objects, shipped_files
    from .validate import validate_objects

    cell = cell_id(program)
    namespace = spec.namespace or "default"
    if spec.warm:  # every run's program travels in the ConfigMap (the kernel delivers it)
        registry = None
    if registry:
        image: str | None = f"{registry}@{PLACEHOLDER_DIGEST}"
        code = CodeSource(image=image)
        files = shipped_files(spec, code, program.files, program.source)
        before: list[Manifest] = []
    else:
        image = None
        files = shipped_files(spec, CodeSource(), program.files, program.source)
        labels = job_labels(spec, cell)
        cm = render_code_configmap(f"{spec.name}-code", namespace, files, labels=labels)
        before = [cm]
        if spec.warm:  # its order is a file of the mount too: how the pods start run 1
            before = list(_warm_before(spec, cm, namespace, labels))
        volume, _mount, _env = code_volume(before[0])
        code = CodeSource(volume={"configMap": volume["configMap"]}, env=(("PYTHONPATH", LIB_DIR),))
    rendered = job_objects(
        spec, code, cell=cell, service_monitor=service_monitor, pins=program.requirements
    )
    validate_objects(rendered)
    if spec.warm:
        rendered = [*rendered[:-1], _warm_job(spec, rendered[-1])]
    objects = (*before, *(copy.deepcopy(o) for o in rendered))
    route: Route = "registry" if registry else "configmap"
    return KubernetesRequest(namespace, route, objects, image=image), files


def _warm_before(
    spec: JobSpec, cm: dict[str, object], namespace: str, labels: Mapping[str, str]
) -> tuple[Manifest, Manifest]:
    """A warm job's ConfigMap ordering run 1 (the pods start it from their mount of it), and
    the Secret with the job's key (what every later delivery is signed with)."""
    from ...warm_shape import DEFAULT_IDLE_S
    from ..warm.orders import key_secret, with_control

    control = {"run": 1, "abort": {}, "idle_limit_s": DEFAULT_IDLE_S}
    return with_control(cm, control), key_secret(spec.name, namespace, labels)


def _warm_job(spec: JobSpec, job: dict[str, object]) -> dict[str, object]:
    """The job labelled warm, with the shape a later cell compares its own with."""
    import json

    from ...warm_shape import warm_shape

    meta: dict[str, object] = dict(cast("Mapping[str, Mapping[str, object]]", job)["metadata"])
    labels = cast("Mapping[str, str]", meta.get("labels") or {})
    meta["labels"] = {**labels, WARM_LABEL: "true"}
    notes = cast("Mapping[str, str]", meta.get("annotations") or {})
    meta["annotations"] = {**notes, SHAPE_ANNOTATION: json.dumps(warm_shape(spec), sort_keys=True)}
    return {**job, "metadata": meta}


def describe(request: KubernetesRequest) -> str:
    """What ``--dry-run`` prints: the objects as YAML, ConfigMap data summarised."""
    from .manifests import to_yaml

    shown: list[Manifest] = []
    for obj in request.objects:
        if obj.get("kind") == "Secret":  # a warm job's key: never shown
            data = obj.get("stringData") or obj.get("data")
            if isinstance(data, Mapping):
                obj = {**obj, "stringData": {k: "<made at submit, not shown>" for k in data}}
        if obj.get("kind") == "ConfigMap":
            summary = {}
            for key in ("data", "binaryData"):
                data = obj.get(key)
                if isinstance(data, Mapping):
                    summary[key] = {k: f"<{len(v)} bytes>" for k, v in data.items()}
            obj = {**obj, **summary}
        shown.append(obj)
    head = (
        "# code: pushed as an image layer to the registry at submit (digest pinned below)\n"
        if request.route == "registry"
        else "# code: the ConfigMap below, mounted at /ktrain (data summarised)\n"
    )
    return head + to_yaml(shown)
