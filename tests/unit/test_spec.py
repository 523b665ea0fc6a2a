from __future__ import annotations

import pytest

from jupyter_ktrain import JobSpec, SpecError
from jupyter_ktrain.flags import parse_flags, spec_from_args
from jupyter_ktrain.spec.job import default_name, max_name_length


def test_defaults_resolve_one_process_per_gpu_or_one() -> None:
    assert JobSpec(name="a").nproc == 1
    spec = JobSpec.create(name="a", nodes=4, resources={"gpus": 8})
    assert (spec.nproc, spec.world_size) == (8, 32)
    assert JobSpec(name="a", nodes=2, procs_per_node=3).world_size == 6


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"name": "Bad_Name"}, "DNS-1035"),
        ({"name": "9lives"}, "DNS-1035"),
        ({"name": "ends-with-"}, "DNS-1035"),
        ({"name": "a" * 60}, "at most"),
        ({"name": "ok", "nodes": 0}, "--nodes must be at least 1"),
        ({"name": "ok", "procs_per_node": 0}, "--procs-per-node"),
        ({"name": "ok", "kind": "PaddleJob"}, "--kind"),
        ({"name": "ok", "backend": "slurm"}, "--backend"),
        ({"name": "ok", "env": {"1BAD": "x"}}, "--env"),
        ({"name": "ok", "colour": "red"}, "Unknown job option"),
        ({"name": "ok", "resources": {"memory": "lots"}}, "--memory"),
    ],
)
def test_bad_spec_is_one_clear_error(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        JobSpec.create(**kwargs)


def test_name_leaves_room_for_replica_suffixes() -> None:
    limit = max_name_length("PyTorchJob", 12)
    assert limit == 63 - len("-worker-11")
    JobSpec(name="a" * limit, nodes=12)
    with pytest.raises(SpecError, match="at most"):
        JobSpec(name="a" * (limit + 1), nodes=12)


def test_default_name_is_a_valid_label_from_the_function() -> None:
    name = default_name("Train_Model")
    assert name.startswith("train-model-")
    JobSpec(name=name, nodes=100)
    assert default_name("_x").startswith("x-")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("--nodse 2", "unrecognized arguments: --nodse"),
        ("--nodes two", "invalid int value"),
        ("--env =no-name", "KEY=VALUE"),
        ("--backend mars", "invalid choice"),
        ("--name 'unclosed", "quotes"),
    ],
)
def test_bad_flags_name_the_flag(line: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        spec_from_args(parse_flags(line))


def test_flags_to_spec() -> None:
    spec = spec_from_args(parse_flags("--nodes 2 --procs-per-node 2 --env A=1 --env B=x=y"), "fit")
    assert (spec.nodes, spec.nproc, spec.env_dict) == (2, 2, {"A": "1", "B": "x=y"})
    assert spec.name.startswith("fit-")
