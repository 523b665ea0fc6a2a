"""Fixtures for registry integration tests: a real docker-registry (no auth and htpasswd auth),
fault/counting proxies in front of it, and a small base image pushed once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .registry_tools import (
    FaultProxy,
    Registry,
    have_registry,
    make_htpasswd,
    push_base_image,
    start_registry,
)

USER, PASSWORD = "ktrain", "s3cret-pass"


def _need_registry() -> None:
    if not have_registry():
        pytest.skip("docker-registry is not installed (.ci/run installs it)")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """An anonymous registry on 127.0.0.1 for the whole session."""
    _need_registry()
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry with htpasswd (Basic) auth; user ``USER``/``PASSWORD``."""
    _need_registry()
    root = tmp_path_factory.mktemp("registry-auth")
    reg = start_registry(root, make_htpasswd(root / "htpasswd", USER, PASSWORD))
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def base_image(registry: Registry) -> str:
    """``HOST/base/tiny:1`` : two small layers with a file the test program reads."""
    layers = [
        {"/etc/base-release": b"tiny-base 1\n"},
        {"/opt/base/basemod.py": b"GREETING = 'hello from the base image'\n"},
    ]
    push_base_image(
        registry.host,
        "base/tiny",
        layers,
        tag="1",
        env=["PATH=/usr/bin:/bin", "PYTHONPATH=/opt/base"],
    )
    return f"{registry.host}/base/tiny:1"


@pytest.fixture
def proxy(registry: Registry) -> Iterator[FaultProxy]:
    """A counting/fault-injecting proxy in front of the anonymous registry."""
    with FaultProxy(registry.host) as p:
        yield p


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
