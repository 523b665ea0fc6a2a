"""``ktrain render [flags | -f spec.yaml]``: print the objects a job would create, as YAML.

The same flags as ``%%ktrain`` (plus ``-f`` for a YAML job spec, explicit flags winning), so
the manifests can be reviewed and kept in git. Objects are validated against the CRD and
Kubernetes schemas unless ``--no-validate``; generated files (``ds_config.json``) are written
to ``--files-dir`` when given. Exit status: 0 rendered, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .cluster_options import add_arguments, spec_from_yaml, spec_kwargs
from .errors import KtrainError, SpecError
from .spec import JobSpec

__all__ = ["build_parser", "render_main"]


def _env(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--env {text!r} is not NAME=VALUE")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ktrain render",
        description="Print the Kubernetes objects of a training job as YAML.",
    )
    parser.add_argument("-f", "--file", metavar="SPEC.yaml", help="YAML job spec")
    parser.add_argument("--name", help="job name (DNS-1035 label)")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--procs-per-node", type=int)
    parser.add_argument("--env", action="append", type=_env, metavar="NAME=VALUE")
    parser.add_argument("--cell", help="label the job ktrain.io/cell=CELL")
    parser.add_argument("--configmap", metavar="NAME", help="code from this ConfigMap")
    parser.add_argument("--files-dir", metavar="DIR", help="write generated files here")
    parser.add_argument("--no-validate", action="store_true", help="skip schema validation")
    parser.add_argument(
        "--service-monitor",
        action="store_true",
        help="with --metrics-port: also a Prometheus operator ServiceMonitor",
    )
    add_arguments(parser)
    return parser


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def spec_from_args(ns: argparse.Namespace) -> JobSpec:
    """The spec from ``-f`` (if any) with the explicit flags on top."""
    kwargs: dict[str, Any] = {"backend": "kubernetes"}
    for key in ("name", "nodes", "procs_per_node"):
        if getattr(ns, key) is not None:
            kwargs[key] = getattr(ns, key)
    if ns.env:
        kwargs["env"] = tuple(ns.env)
    kwargs.update(spec_kwargs(ns))
    if ns.file:
        base = spec_from_yaml(ns.file)
        return _rebuild(base, kwargs)
    missing = [
        f for f, key in (("--name NAME", "name"), ("--image IMAGE", "image")) if not kwargs.get(key)
    ]
    if missing:
        raise SpecError(
            f"ktrain render needs {' and '.join(missing)} (or name:/image: in -f SPEC.yaml), "
            "e.g. ktrain render --name llama-ft --image nvcr.io/nvidia/pytorch:24.03-py3 "
            "--nodes 4 --gpus-per-node 8."
        )
    return JobSpec.create(**kwargs)


def _rebuild(base: JobSpec, flags: dict[str, Any]) -> JobSpec:
    from dataclasses import asdict, fields

    current = {f.name: getattr(base, f.name) for f in fields(base)}
    merged: dict[str, Any] = dict(current)
    for key, value in flags.items():
        if isinstance(value, dict) and key in current and not isinstance(current[key], dict):
            merged[key] = _merge(asdict(current[key]), value)
        else:
            merged[key] = value
    return JobSpec.create(**merged)


def render_main(argv: list[str]) -> int:
    """Entry point of ``ktrain render``; prints YAML to stdout, errors to stderr."""
    from .backends.kubernetes.manifests import CodeSource, render, to_yaml
    from .backends.kubernetes.validate import validate_objects

    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        spec = spec_from_args(ns)
        code = CodeSource.configmap(ns.configmap) if ns.configmap else CodeSource()
        if ns.service_monitor and spec.metrics_port is None:
            raise SpecError("--service-monitor scrapes the agents' --metrics-port: add it.")
        rendered = render(spec, code, cell=ns.cell, service_monitor=ns.service_monitor)
        if not ns.no_validate:
            validate_objects(rendered.objects)
    except KtrainError as exc:
        sys.stderr.write(f"ktrain render: error: {exc}\n")
        return 2
    if ns.files_dir:
        folder = Path(ns.files_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in rendered.files.items():
            (folder / name).write_bytes(data)
    sys.stdout.write(to_yaml(rendered.objects))
    for name in rendered.files:
        where = f"written to {ns.files_dir}" if ns.files_dir else "use --files-dir to write it"
        sys.stderr.write(f"ktrain render: the job ships {name} ({where})\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(render_main(sys.argv[1:]))
