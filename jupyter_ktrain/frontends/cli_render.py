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

from ..errors import KtrainError, SpecError
from ..flags import add_job_flags, merge_values, values_from_args, values_from_yaml
from ..spec.job import JobSpec

__all__ = ["build_parser", "render_main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ktrain render",
        description="Print the Kubernetes objects of a training job as YAML.",
    )
    parser.add_argument("-f", "--file", metavar="SPEC.yaml", help="YAML job spec")
    parser.add_argument("--cell", help="label the job ktrain.io/cell=CELL")
    parser.add_argument("--configmap", metavar="NAME", help="code from this ConfigMap")
    parser.add_argument("--files-dir", metavar="DIR", help="write generated files here")
    parser.add_argument("--no-validate", action="store_true", help="skip schema validation")
    parser.add_argument(
        "--service-monitor",
        action="store_true",
        help="with --metrics-port: also a Prometheus operator ServiceMonitor",
    )
    add_job_flags(parser)
    return parser


def spec_from_args(ns: argparse.Namespace) -> JobSpec:
    """The spec from ``-f`` (if any) with the explicit flags on top."""
    values = {"backend": "kubernetes", **values_from_args(ns)}
    if ns.file:
        values = merge_values(values_from_yaml(ns.file), values)
    missing = [
        f for f, key in (("--name NAME", "name"), ("--image IMAGE", "image")) if not values.get(key)
    ]
    if missing:
        raise SpecError(
            f"ktrain render needs {' and '.join(missing)} (or name:/image: in -f SPEC.yaml), "
            "e.g. ktrain render --name llama-ft --image nvcr.io/nvidia/pytorch:24.03-py3 "
            "--nodes 4 --gpus-per-node 8."
        )
    return JobSpec.create(**values)


def render_main(argv: list[str]) -> int:
    """Entry point of ``ktrain render``; prints YAML to stdout, errors to stderr."""
    from ..backends.registry import render_kubernetes

    parser = build_parser()
    ns = parser.parse_args(argv)
    try:
        spec = spec_from_args(ns)
        if ns.service_monitor and spec.metrics_port is None:
            raise SpecError("--service-monitor scrapes the agents' --metrics-port: add it.")
        text, files = render_kubernetes(
            spec,
            configmap=ns.configmap,
            cell=ns.cell,
            service_monitor=ns.service_monitor,
            validate=not ns.no_validate,
        )
    except KtrainError as exc:
        sys.stderr.write(f"ktrain render: error: {exc}\n")
        return 2
    if ns.files_dir:
        folder = Path(ns.files_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    sys.stdout.write(text)
    for name in files:
        where = f"written to {ns.files_dir}" if ns.files_dir else "use --files-dir to write it"
        sys.stderr.write(f"ktrain render: the job ships {name} ({where})\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(render_main(sys.argv[1:]))
