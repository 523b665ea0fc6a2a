"""Credentials from docker config.json and real credential-helper processes."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from jupyter_ktrain.errors import RegistryError
from jupyter_ktrain.packaging.auth import Credentials, find_credentials


def _env(tmp_path: Path, config: dict[str, object]) -> dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps(config))
    path = f"{tmp_path}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"DOCKER_CONFIG": str(tmp_path), "HOME": str(tmp_path), "PATH": path}


def _helper(tmp_path: Path, name: str, script: str) -> None:
    exe = tmp_path / f"docker-credential-{name}"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_auths_entry_with_base64_auth(tmp_path: Path) -> None:
    auth = base64.b64encode(b"alice:pw:with:colons").decode()
    env = _env(tmp_path, {"auths": {"https://reg.example.com": {"auth": auth}}})
    creds = find_credentials("reg.example.com", env=env)
    assert (creds.username, creds.password) == ("alice", "pw:with:colons")
    assert "pw" not in repr(creds)


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


def test_explicit_credentials_win_and_nothing_means_anonymous(tmp_path: Path) -> None:
    env = _env(tmp_path, {})
    explicit = {"reg.example.com": Credentials("u", "p")}
    assert find_credentials("reg.example.com", explicit, env=env) == Credentials("u", "p")
    assert find_credentials("reg.example.com", env=env).anonymous
