"""Credentials from docker config.json and real credential-helper processes.

The tests of tests/unit/test_packaging_auth.py that start processes (a unit test starts none)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from jupyter_ktrain.errors import RegistryError
from jupyter_ktrain.packaging.auth import Credentials, find_credentials
from tests.unit.test_packaging_auth import _env


def _helper(tmp_path: Path, name: str, script: str) -> None:
    exe = tmp_path / f"docker-credential-{name}"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_cred_helper_is_run_with_the_server_on_stdin(tmp_path: Path) -> None:
    _helper(
        tmp_path,
        "ktraintest",
        'read server; [ "$1" = get ] || exit 3\n'
        'printf \'{"ServerURL":"%s","Username":"bob","Secret":"s-%s"}\' "$server" "$server"\n',
    )
    env = _env(tmp_path, {"credHelpers": {"reg.example.com": "ktraintest"}})
    creds = find_credentials("reg.example.com", env=env)
    assert creds == Credentials("bob", "s-reg.example.com")


def test_creds_store_identity_token_and_not_found(tmp_path: Path) -> None:
    _helper(
        tmp_path,
        "store",
        'read server\nif [ "$server" = "tok.example.com" ]; then\n'
        '  echo \'{"Username":"<token>","Secret":"refresh"}\'\n'
        "else echo 'credentials not found in native keychain'; exit 1; fi\n",
    )
    env = _env(tmp_path, {"credsStore": "store"})
    assert find_credentials("tok.example.com", env=env) == Credentials(identity_token="refresh")
    assert find_credentials("other.example.com", env=env).anonymous


def test_a_missing_helper_is_a_clear_error(tmp_path: Path) -> None:
    env = _env(tmp_path, {"credHelpers": {"reg.example.com": "does-not-exist-xyz"}})
    with pytest.raises(RegistryError, match="docker-credential-does-not-exist-xyz"):
        find_credentials("reg.example.com", env=env)
