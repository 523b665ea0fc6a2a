"""Credentials from docker config.json and real credential-helper processes."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from jupyter_ktrain.packaging.auth import Credentials, find_credentials


def _env(tmp_path: Path, config: dict[str, object]) -> dict[str, str]:
    (tmp_path / "config.json").write_text(json.dumps(config))
    path = f"{tmp_path}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {"DOCKER_CONFIG": str(tmp_path), "HOME": str(tmp_path), "PATH": path}


def test_auths_entry_with_base64_auth(tmp_path: Path) -> None:
    auth = base64.b64encode(b"alice:pw:with:colons").decode()
    env = _env(tmp_path, {"auths": {"https://reg.example.com": {"auth": auth}}})
    creds = find_credentials("reg.example.com", env=env)
    assert (creds.username, creds.password) == ("alice", "pw:with:colons")
    assert "pw" not in repr(creds)


def test_explicit_credentials_win_and_nothing_means_anonymous(tmp_path: Path) -> None:
    env = _env(tmp_path, {})
    explicit = {"reg.example.com": Credentials("u", "p")}
    assert find_credentials("reg.example.com", explicit, env=env) == Credentials("u", "p")
    assert find_credentials("reg.example.com", env=env).anonymous
