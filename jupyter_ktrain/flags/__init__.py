"""The job's options as flags and as YAML: the one front end of :class:`JobSpec`.

``%%ktrain`` and ``ktrain render`` add the same job flags to their parsers
(:func:`add_job_flags`, from the table :data:`JOB_FLAGS` in ``table.py``).
:func:`values_from_args` turns the flags given into *values*, the plain data a YAML job file
holds (:func:`values_from_yaml`); :meth:`JobSpec.create` converts values into a spec, once, for
all three (``parse.py``; :mod:`jupyter_ktrain.spec.values`).

Every mistake becomes one :class:`SpecError` that names the flag and what to do; nothing calls
``sys.exit`` inside a kernel.
"""

from __future__ import annotations

from .parse import (
    add_job_flags,
    build_parser,
    env_names,
    merge_values,
    parse_flags,
    spec_from_args,
    spec_from_values,
    spec_from_yaml,
    values_from_args,
    values_from_yaml,
)
from .table import JOB_FLAGS, Flag, key_value

__all__ = [
    "JOB_FLAGS",
    "Flag",
    "add_job_flags",
    "build_parser",
    "env_names",
    "key_value",
    "merge_values",
    "parse_flags",
    "spec_from_args",
    "spec_from_values",
    "spec_from_yaml",
    "values_from_args",
    "values_from_yaml",
]
