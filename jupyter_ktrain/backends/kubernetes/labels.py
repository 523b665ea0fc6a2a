"""The labels ktrain puts on every object it creates (the job, its pods, its Services): how a
job, its kind, its notebook cell and ktrain's own objects are found again. Pure constants."""

from __future__ import annotations

__all__ = ["CELL_LABEL", "JOB_LABEL", "KIND_LABEL", "MANAGED_BY"]

JOB_LABEL = "ktrain.io/job"
CELL_LABEL = "ktrain.io/cell"
KIND_LABEL = "ktrain.io/kind"
MANAGED_BY = ("app.kubernetes.io/managed-by", "jupyter-ktrain")
