"""The labels and annotations ktrain puts on the objects it creates (the job, its pods, its
Services, a warm job's ConfigMap): how a job, its kind, its notebook cell, its warm shape and
ktrain's own objects are found again. The one place a ``ktrain.io/`` key is spelled; the warm
control annotation is spelled in :mod:`jupyter_ktrain.pod.agent.mirror` (the pods' agents read
it, and ``pod/`` imports nothing above it) and named here. Pure constants."""

from __future__ import annotations

from ...pod.agent.mirror import CONTROL_ANNOTATION

__all__ = [
    "CELL_LABEL",
    "CONTROL_ANNOTATION",
    "HANG_AFTER_ANNOTATION",
    "JOB_LABEL",
    "KIND_LABEL",
    "MANAGED_BY",
    "MAX_RESTARTS_ANNOTATION",
    "PATCH_MANAGER",
    "SHAPE_ANNOTATION",
    "WARM_LABEL",
]

JOB_LABEL = "ktrain.io/job"
CELL_LABEL = "ktrain.io/cell"
KIND_LABEL = "ktrain.io/kind"
MANAGED_BY = ("app.kubernetes.io/managed-by", "jupyter-ktrain")
WARM_LABEL = "ktrain.io/warm"  # a warm job (``--warm``): ``true``
SHAPE_ANNOTATION = "ktrain.io/warm-shape"  # a warm job's shape, JSON (what a run must match)
# the job's limit of fault restarts, for the monitor ("restarted 1 of 3 times")
MAX_RESTARTS_ANNOTATION = "ktrain.io/max-restarts"
# ``--hang-after``, in seconds: what a reader that follows nothing names a hang by
HANG_AFTER_ANNOTATION = "ktrain.io/hang-after"
PATCH_MANAGER = "ktrain.io/notebook"  # the field manager of ktrain's patches to a job
