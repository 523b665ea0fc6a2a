"""Values -> :class:`~jupyter_ktrain.spec.job.JobSpec`: the one conversion every front end uses.

*Values* are the plain data a YAML job file holds (``nodes: 4``, ``resources: {gpus: 8}``,
``storage: {mounts: ["data:/data:ro"]}``). ``%%ktrain`` and ``ktrain render`` turn their flags
into the same values (:func:`jupyter_ktrain.flags.values_from_args`), and
:meth:`JobSpec.create <jupyter_ktrain.spec.job.JobSpec.create>` converts them here, once: text
forms are parsed (``PVC:/path:ro``, ``key:Effect``, ``2:8``), presets and the files values
name are read (``rdma: roce`` or a profile file, :mod:`jupyter_ktrain.spec.rdma`; ``deepspeed:
zero3`` or a config file, :mod:`jupyter_ktrain.spec.deepspeed`; ``affinity: "@FILE"``). Typed parts
(a :class:`~jupyter_ktrain.spec.job.Rdma`, ...) pass through, so Python callers may mix both.

Besides the spec's fields, values have the short forms of the flags: ``max_restarts`` (the run
policy's backoffLimit, and an elastic job's torchrun restarts), ``storage: {dataset,
checkpoints}`` (mounts named ``datasets`` and ``checkpoints``), ``rdma: {preset | file,
profiles, host_network}`` and ``deepspeed: {preset | file, ...DeepSpeed fields}``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import yaml

from ..errors import SpecError
from .deepspeed import resolve_deepspeed
from .parts import DeepSpeed, Mount, Rdma, Resources, SecretEnv, Storage
from .rdma import resolve_profile
from .scheduling import Elastic, InitContainer, RunPolicy, Scheduling, Toleration

__all__ = ["SHORT_FORMS", "convert"]

SHORT_FORMS = ("max_restarts",)  # values that are no field of JobSpec (see the docstring)
_NAMED_MOUNTS = (("dataset", "datasets"), ("checkpoints", "checkpoints"))  # storage short forms


def convert(values: Mapping[str, Any], spec_fields: Iterable[str]) -> dict[str, Any]:
    """:class:`JobSpec` keyword arguments from ``values``, given the names of its fields
    (``JobSpec.create`` passes them: the spec is above this module); an unknown key is an
    error that lists the known ones."""
    known = set(spec_fields) | set(SHORT_FORMS)
    unknown = sorted(set(values) - known)
    if unknown:
        raise SpecError(
            f"Unknown job option(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}."
        )
    out = dict(values)
    max_restarts = out.pop("max_restarts", None)
    for key, convert_value in _CONVERT.items():
        if out.get(key) is not None:
            out[key] = convert_value(out[key])
    if max_restarts is not None:
        _set_max_restarts(out, max_restarts)
    return out


def _set_max_restarts(out: dict[str, Any], limit: int) -> None:
    policy = out.get("run_policy") or RunPolicy()
    if policy.backoff_limit not in (None, limit):
        raise SpecError(
            "--max-restarts and --backoff-limit set the same limit differently: keep one."
        )
    out["run_policy"] = replace(policy, backoff_limit=limit)
    if out.get("elastic") is not None:
        out["elastic"] = replace(out["elastic"], max_restarts=limit)


def _check_keys(cls: type, value: Mapping[str, Any], what: str) -> None:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise SpecError(
            f"Unknown {what} option(s): {', '.join(map(str, unknown))}. "
            f"Known: {', '.join(sorted(known))}."
        )


def _pairs(value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, Mapping):
        return tuple((str(k), str(v)) for k, v in value.items())
    return tuple((str(k), str(v)) for k, v in value)


def _many(convert_one: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, ...]]:
    def inner(value: Any) -> tuple[Any, ...]:
        items = [value] if isinstance(value, (str, Mapping)) else list(value)
        return tuple(convert_one(v) for v in items)

    return inner


def _obj(cls: type, parse: Callable[[str], Any] | None = None) -> Callable[[Any], Any]:
    """A mapping -> ``cls(**mapping)``; text -> ``parse(text)``; a ``cls`` passes through."""

    def inner(value: Any) -> Any:
        if isinstance(value, Mapping):
            _check_keys(cls, value, cls.__name__)
            return cls(**value)
        if isinstance(value, str) and parse is not None:
            return parse(value)
        return value

    return inner


def _storage(value: Any) -> Storage:
    if isinstance(value, Storage):
        return value
    if not isinstance(value, Mapping):
        raise SpecError("storage must be a mapping with 'mounts' and 'shm'.")
    body = dict(value)
    mounts = [
        Mount.parse(body.pop(key), flag=f"--{key}", name=name)
        for key, name in _NAMED_MOUNTS
        if body.get(key) is not None
    ]
    mounts += _many(_obj(Mount, Mount.parse))(body.pop("mounts", None) or ())
    _check_keys(Storage, body, "storage")
    return Storage(mounts=tuple(mounts), **body)


def _affinity(value: Any) -> Any:
    """``--affinity YAML|@FILE``: text is read (from the file after ``@``) as YAML."""
    if not isinstance(value, str):
        return value
    try:
        parsed = yaml.safe_load(Path(value[1:]).read_text() if value.startswith("@") else value)
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"--affinity {value!r} is not readable YAML ({exc}).") from None
    if not isinstance(parsed, dict):
        raise SpecError(
            "--affinity must be a YAML mapping, e.g. --affinity "
            "'{nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: ...}}'."
        )
    return parsed


def _scheduling(value: Any) -> Scheduling:
    if isinstance(value, Scheduling):
        return value
    if not isinstance(value, Mapping):
        raise SpecError("scheduling must be a mapping (node_selector, tolerations, ...).")
    body = dict(value)
    parts: dict[str, Callable[[Any], Any]] = {
        "node_selector": _pairs,
        "tolerations": _many(_obj(Toleration, Toleration.parse)),
        "init_containers": _many(_obj(InitContainer, InitContainer.parse)),
        "image_pull_secrets": _many(str),
        "affinity": _affinity,
    }
    for key, convert_value in parts.items():
        if body.get(key) is not None:
            body[key] = convert_value(body[key])
    _check_keys(Scheduling, body, "scheduling")
    return Scheduling(**body)


def _preset(value: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``{preset: NAME}`` or ``{file: PATH}`` and the fields given with it."""
    body = dict(value)
    preset, file = body.pop("preset", None), body.pop("file", None)
    source = preset if preset is not None else file
    return (None if source is None else str(source)), body


def _rdma(value: Any) -> Rdma:
    if isinstance(value, Rdma):
        return value
    if isinstance(value, str):
        return resolve_profile(value)
    if not isinstance(value, Mapping):
        raise SpecError(
            "rdma must be a profile name (infiniband, roce, tcp), a profile file, or a profile "
            "mapping."
        )
    source, body = _preset(value)
    if source is None:
        return Rdma.from_dict(body, name=str(body.get("name", "custom")))
    profile = resolve_profile(source, profiles_file=body.pop("profiles", None))
    _check_keys(Rdma, body, f"--rdma {source}")
    return replace(profile, **body) if body else profile


def _deepspeed(value: Any) -> DeepSpeed:
    if isinstance(value, DeepSpeed):
        return value
    if isinstance(value, str):
        return resolve_deepspeed(value)
    if not isinstance(value, Mapping):
        raise SpecError(
            "deepspeed must be zero1|zero2|zero3, a config file, or a mapping (preset or file, "
            "and DeepSpeed fields)."
        )
    source, body = _preset(value)
    _check_keys(DeepSpeed, body, "deepspeed")
    return DeepSpeed(**body) if source is None else resolve_deepspeed(source, **body)


def parse_duration(text: str, flag: str = "--idle") -> float:
    """``15m`` -> 900.0; ``90s``, ``1h``, ``0``; a bare number is minutes (``flag`` names the
    option in the error)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m:
        end = ", or 0 (end)" if flag == "--idle" else ""
        raise SpecError(f"{flag} {text!r} is not a duration: use e.g. 90s, 15m, 2h{end}.")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "": 60}[m.group(2)]


def _hang_after(value: Any) -> float:
    seconds = parse_duration(str(value), "--hang-after")
    if seconds <= 0:
        raise SpecError(f"--hang-after {value!r} must be longer than 0: use e.g. 30s or 5m.")
    return seconds


_CONVERT: dict[str, Callable[[Any], Any]] = {
    "hang_after": _hang_after,
    "resources": _obj(Resources),
    "env": _pairs,
    "labels": _pairs,
    "rdma": _rdma,
    "deepspeed": _deepspeed,
    "storage": _storage,
    "scheduling": _scheduling,
    "run_policy": _obj(RunPolicy),
    "elastic": _obj(Elastic, Elastic.parse),
    "secret_env": _many(_obj(SecretEnv, SecretEnv.parse)),
    "env_from_secrets": _many(str),
    "pass_env": _many(str),
    "allow_secrets": _many(str),
}
