"""jupyter-ktrain: run a notebook's training function as a multi-node job and watch it.

In a notebook::

    %load_ext jupyter_ktrain

    %%ktrain --nodes 2 --procs-per-node 2
    result = train(epochs=3)

or from plain Python, ``jupyter_ktrain.run(train, args=(3,), nodes=2)`` (``submit`` returns at
once; ``sweep`` runs many trials). Inside ``train()``,
``jupyter_ktrain.report(step=step, loss=loss)`` plots metrics live and
``jupyter_ktrain.checkpoint()`` saves and resumes training state across restarts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# The pod side, eagerly: in a job only this file and jupyter_ktrain/pod/ are there
# (packaging.layer.runner_files), so ``import jupyter_ktrain`` must need nothing else.
from .pod.checkpoint.plain import Checkpoints, checkpoint
from .pod.report import report

if TYPE_CHECKING:
    from .backends.base import Job
    from .errors import (
        BackendError,
        CaptureError,
        ClusterError,
        JobFailed,
        JobNotFound,
        KtrainError,
        PackagingError,
        PreflightError,
        RegistryError,
        SecretError,
        SpecError,
    )
    from .frontends.api import run, submit, sweep
    from .spec.job import JobSpec, Resources
    from .sweep.trials import Sweep

# The notebook side, on first use (PEP 562): name -> its module
_LAZY = {
    **dict.fromkeys(
        (
            "BackendError",
            "CaptureError",
            "ClusterError",
            "JobNotFound",
            "KtrainError",
            "PackagingError",
            "PreflightError",
            "RegistryError",
            "SecretError",
            "SpecError",
        ),
        "errors",
    ),
    "JobSpec": "spec.job",
    "Resources": "spec.job",
    "Job": "backends.base",
    "JobFailed": "errors",
    "run": "frontends.api",
    "submit": "frontends.api",
    "sweep": "frontends.api",
    "Sweep": "sweep.trials",
}

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "CaptureError",
    "Checkpoints",
    "ClusterError",
    "Job",
    "JobFailed",
    "JobNotFound",
    "JobSpec",
    "KtrainError",
    "PackagingError",
    "PreflightError",
    "RegistryError",
    "Resources",
    "SecretError",
    "SpecError",
    "Sweep",
    "__version__",
    "checkpoint",
    "load_ipython_extension",
    "report",
    "run",
    "submit",
    "sweep",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_ktrain``: register the ``%%ktrain`` and ``%ktrain`` magics (and
    let ``%%ktrain --help`` stand alone in a cell)."""
    from .frontends.magics import KtrainMagics, help_alone

    ipython.register_magics(KtrainMagics(ipython))
    cleanup = getattr(ipython, "input_transformers_cleanup", None)
    if cleanup is not None and help_alone not in cleanup:
        cleanup.append(help_alone)
    _warm_up_cluster_validation()


def _warm_up_cluster_validation() -> None:
    """With the Kubernetes backend as the configured default, compile the manifest validators
    in the background now, so the first job's dry run and submit do not wait for them."""
    import threading

    try:
        from .backends.registry import default_backend_name, warm_up

        name = default_backend_name()
        if name != "kubernetes":
            return
    except Exception:  # a broken config is reported when a job uses it, not at load time
        return
    threading.Thread(target=warm_up, args=(name,), name="ktrain-warm-up", daemon=True).start()


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """Jupyter server hook: the ``/ktrain/api`` handlers of the side panel."""
    return [{"module": "jupyter_ktrain.server"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """JupyterLab hook: the prebuilt "ktrain jobs" panel (built from ``labextension/``)."""
    return [{"src": "labextension", "dest": "jupyter-ktrain"}]


def unload_ipython_extension(ipython: Any) -> None:  # pragma: no cover - IPython hook
    """Nothing to undo: magics stay registered until the kernel restarts."""
