"""Render a :class:`~jupyter_ktrain.spec.job.JobSpec` into the Kubernetes objects that run it.

Pure: no I/O, no cluster. The public surface::

    rendered = render(spec, CodeSource(), cell="a1b2c3")   # -> Rendered(objects, files)
    validate_objects(rendered.objects)                      # .validate: CRD + pod schemas
    print(to_yaml(rendered.objects))                        # what --dry-run prints

``Rendered.files`` holds files the job needs next to its program (``ds_config.json``); the
packaging route (code layer or ConfigMap) ships them into ``/ktrain`` with ``program.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ....errors import SpecError
from ....kinds import KIND_TABLE
from ....spec.deepspeed import CONFIG_FILE, config_bytes
from ....spec.job import JobSpec
from .builders import builder, pin_ray_version
from .podtemplate import CodeSource, job_labels
from .scrape import metrics_objects

REQUIREMENTS = "requirements.txt"  # the program's pins, shipped beside it (capture/cell_program.py)

__all__ = ["CodeSource", "Rendered", "job_objects", "render", "shipped_files", "to_yaml"]


@dataclass(frozen=True)
class Rendered:
    """The objects to create, in order, and the files to ship with the program."""

    objects: list[dict[str, Any]]
    files: dict[str, bytes] = field(default_factory=dict)

    @property
    def job(self) -> dict[str, Any]:
        return self.objects[-1]

    def yaml(self) -> str:
        return to_yaml(self.objects)


def render(
    spec: JobSpec,
    code: CodeSource | None = None,
    files: Mapping[str, bytes] | None = None,
    *,
    cell: str | None = None,
    service_monitor: bool = False,
    program_source: str | None = None,
) -> Rendered:
    """The job object for ``spec`` plus its generated files.

    ``code`` says how the program reaches ``/ktrain`` (default: ``spec.image`` holds it).
    ``files`` are extra files to ship (returned merged with the generated ones); ``cell``
    labels the job and its pods ``ktrain.io/cell`` so the notebook can find them later. With
    ``spec.metrics_port`` the metrics Service comes first, and a ServiceMonitor with
    ``service_monitor`` (the cluster serves ``monitoring.coreos.com``; see :mod:`.scrape`);
    ``program_source`` makes a generated DeepSpeed config fit the program's Transformers
    ``TrainingArguments`` when it has them. Raises :class:`SpecError` for what the schema
    cannot express (see :mod:`.validate`).
    """
    code = code or CodeSource()
    shipped = shipped_files(spec, code, files, program_source)
    pins = shipped.get(REQUIREMENTS, b"").decode().splitlines()
    objects = job_objects(spec, code, cell=cell, service_monitor=service_monitor, pins=pins)
    return Rendered(objects=objects, files=shipped)


def shipped_files(
    spec: JobSpec,
    code: CodeSource,
    files: Mapping[str, bytes] | None = None,
    program_source: str | None = None,
) -> dict[str, bytes]:
    """The first half of :func:`render`: check ``spec`` (one :class:`SpecError` before
    anything else), then ``files`` merged with the generated ones (``ds_config.json``). A
    route whose code source depends on the files (the ConfigMap's items) calls this, then
    :func:`job_objects` once."""
    from .validate import check_semantics

    if not (code.image or spec.image):
        raise SpecError(
            "The kubernetes backend needs a container image: pass --image (e.g. --image "
            "nvcr.io/nvidia/pytorch:24.03-py3)."
        )
    check_semantics(spec)
    out_files = dict(files or {})
    if spec.deepspeed is not None:
        out_files[CONFIG_FILE] = config_bytes(spec.deepspeed, spec.world_size, program_source)
    return out_files


def job_objects(
    spec: JobSpec,
    code: CodeSource,
    *,
    cell: str | None = None,
    service_monitor: bool = False,
    pins: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The second half of :func:`render`: the objects, in creation order (the job last).
    ``pins``: the program's requirements (``name==version``); a RayJob names its Ray."""
    labels = job_labels(spec, cell)
    job = builder(KIND_TABLE[spec.kind])(spec, code, labels)
    if spec.kind == "RayJob":
        pin_ray_version(job, pins)
    extra = metrics_objects(spec, labels, service_monitor=service_monitor)
    return [*extra, job]


class _Dumper(yaml.SafeDumper):
    """Block style; multi-line strings as literal blocks; never anchors/aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """A multi-document YAML stream, keys in rendering order (``kubectl apply -f`` ready)."""
    return yaml.dump_all(
        [dict(o) for o in objects], Dumper=_Dumper, sort_keys=False, default_flow_style=False
    )
