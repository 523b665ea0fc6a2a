"""The backend registry: the one way into a backend's package from the rest of
``jupyter_ktrain`` (a test holds every other module to it): front ends and views name a backend
here, and get it, its default, the ones listed, or what it can do without a job (``render``).

It sits above the backends it registers (:mod:`.local`, :mod:`.kubernetes`), which import
nothing of it; each backend's package is imported on first use (a cluster's client is loaded only
when a cluster is used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SpecError
from ..extras import EXTRAS, missing_modules, require

if TYPE_CHECKING:
    from ..config import Config
    from ..spec.job import JobSpec
    from .base import Backend

__all__ = [
    "default_backend_name",
    "get_backend",
    "listed_backends",
    "render_kubernetes",
    "warm_up",
]


def default_backend_name() -> str:
    """``backend`` from the user config (``%ktrain config backend=...``); else ``kubernetes``
    in a pod with a service account token (a Kubeflow notebook: its cluster is the one the
    pod runs on, its namespace the pod's), else ``local``."""
    from ..config import load_config
    from .kubernetes.client.kube_api import in_cluster

    return load_config().backend or ("kubernetes" if in_cluster() else "local")


def get_backend(name: str | None = None, config: Config | None = None) -> Backend:
    """The backend called ``name`` (default: the configured one); ``config``: the settings a
    cluster backend uses instead of the user's config file."""
    name = name or default_backend_name()
    if name == "local":
        from .local import LocalBackend

        return LocalBackend()
    if name == "kubernetes":
        require("kubernetes")
        from .kubernetes.backend import KubernetesBackend

        return KubernetesBackend(config=config)
    raise SpecError(f"--backend {name!r} is not known; use --backend local or kubernetes.")


def listed_backends() -> list[str]:
    """What ``list`` and the side panel show: ``local`` always (local jobs never hide behind
    an unreachable cluster), then the configured backend when it is another one."""
    configured = default_backend_name()
    return ["local"] if configured == "local" else ["local", configured]


def warm_up(name: str) -> None:
    """Do now what the first job of backend ``name`` would wait for: the Kubernetes backend
    compiles its manifest validators and imports its modules and the Kubernetes client's
    (about 0.3 s here, up to a second on a loaded machine; no request is made)."""
    if name == "kubernetes" and not missing_modules(EXTRAS["kubernetes"].modules):
        import kubernetes.client
        import kubernetes.config  # noqa: F401

        from .kubernetes.backend import KubernetesBackend  # noqa: F401
        from .kubernetes.plans.validate import warm_up as compile_validators

        compile_validators()


def render_kubernetes(
    spec: JobSpec,
    *,
    configmap: str | None = None,
    cell: str | None = None,
    service_monitor: bool = False,
    validate: bool = True,
) -> tuple[str, dict[str, bytes]]:
    """``ktrain render``: the Kubernetes objects of ``spec`` as YAML, checked against the CRD
    and pod schemas unless not ``validate``, and the files the job ships (``ds_config.json``).

    ``configmap`` names a ConfigMap holding the code (default: the image holds it); ``cell``
    labels the job ``ktrain.io/cell``; ``service_monitor`` adds a Prometheus operator
    ServiceMonitor for ``--metrics-port``."""
    if validate:
        require(
            "kubernetes",
            "Checking the manifests against the Kubernetes and Kubeflow schemas (--no-validate "
            "skips it)",
        )
    from .kubernetes.plans.manifests import CodeSource, render
    from .kubernetes.plans.validate import validate_objects

    code = CodeSource.configmap(configmap) if configmap else CodeSource()
    rendered = render(spec, code, cell=cell, service_monitor=service_monitor)
    if validate:
        validate_objects(rendered.objects)
    return rendered.yaml(), rendered.files
