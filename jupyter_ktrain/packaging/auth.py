"""Registry credentials and authentication challenges.

Where credentials come from, first hit wins:

1. ``credentials=`` passed by the caller (e.g. from ``%ktrain config``), keyed by registry host;
2. docker ``config.json`` (``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``), then
   ``$REGISTRY_AUTH_FILE`` / containers ``auth.json``: ``credHelpers[host]``, then ``auths[host]``
   (base64 ``auth`` or ``username``/``password``, ``identitytoken``), then ``credsStore``;
3. anonymous.

A credential helper is ``docker-credential-NAME get`` fed the server URL on stdin, answering
``{"Username": ..., "Secret": ...}``; ``Username == "<token>"`` marks an identity (refresh) token.
Secrets live only in memory and never appear in messages.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import RegistryError

__all__ = ["Challenge", "Credentials", "find_credentials", "parse_challenge"]

_DOCKER_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io")


@dataclass(frozen=True)
class Credentials:
    """Username + secret; ``identity_token`` set when the secret is an OAuth refresh token."""

    username: str = ""
    password: str = ""
    identity_token: str = ""

    def __repr__(self) -> str:  # never print secrets
        return f"Credentials(username={self.username!r}, secret=***)"

    @property
    def anonymous(self) -> bool:
        return not (self.username or self.password or self.identity_token)

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()


@dataclass(frozen=True)
class Challenge:
    """A parsed ``WWW-Authenticate`` header: scheme (lower case) and its parameters."""

    scheme: str
    params: Mapping[str, str]


_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')


def parse_challenge(header: str) -> Challenge:
    """``Bearer realm="https://auth",service="reg",scope="repository:a:pull"`` -> Challenge."""
    scheme, _, rest = header.strip().partition(" ")
    params = {
        m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
        for m in _PARAM.finditer(rest)
    }
    return Challenge(scheme.lower(), {k: v.replace('\\"', '"') for k, v in params.items()})


def _config_files(env: Mapping[str, str]) -> list[Path]:
    docker_dir = env.get("DOCKER_CONFIG") or str(
        Path(env.get("HOME", "~")).expanduser() / ".docker"
    )
    files = [Path(docker_dir) / "config.json"]
    if env.get("REGISTRY_AUTH_FILE"):
        files.append(Path(env["REGISTRY_AUTH_FILE"]))
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        files.append(Path(runtime) / "containers" / "auth.json")
    return files


def _host_keys(host: str) -> list[str]:
    keys = [host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]
    if host in ("registry-1.docker.io", "docker.io", "index.docker.io"):
        keys += list(_DOCKER_HUB_KEYS)
    return keys


def run_helper(name: str, server: str, env: Mapping[str, str] | None = None) -> Credentials:
    """Ask ``docker-credential-{name} get`` for ``server``'s credentials (anonymous if none)."""
    try:
        proc = subprocess.run(
            [f"docker-credential-{name}", "get"],
            input=server.encode(),
            capture_output=True,
            timeout=30,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegistryError(
            f"The docker credential helper 'docker-credential-{name}' for {server} could not "
            f"run ({type(exc).__name__}). Install it or remove it from your docker config.json."
        ) from exc
    if proc.returncode != 0:
        if b"credentials not found" in proc.stdout + proc.stderr:
            return Credentials()
        raise RegistryError(
            f"The docker credential helper 'docker-credential-{name}' failed for {server} "
            f"(exit {proc.returncode}). Log in again (e.g. `docker login {server}`)."
        )
    try:
        out = json.loads(proc.stdout)
        user, secret = str(out["Username"]), str(out["Secret"])
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(
            f"The docker credential helper 'docker-credential-{name}' gave an unreadable answer."
        ) from exc
    if user == "<token>":
        return Credentials(identity_token=secret)
    return Credentials(user, secret)


def _from_entry(entry: Mapping[str, str]) -> Credentials:
    if entry.get("identitytoken"):
        return Credentials(identity_token=entry["identitytoken"])
    if entry.get("auth"):
        user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        return Credentials(user, password)
    return Credentials(entry.get("username", ""), entry.get("password", ""))


def _from_config(doc: Mapping[str, object], host: str, env: Mapping[str, str]) -> Credentials:
    keys = _host_keys(host)
    helpers = doc.get("credHelpers")
    if isinstance(helpers, dict):
        for key in keys:
            if key in helpers:
                return run_helper(str(helpers[key]), key, env)
    auths = doc.get("auths")
    if isinstance(auths, dict):
        for key in keys:
            entry = auths.get(key)
            if isinstance(entry, dict):
                creds = _from_entry(entry)
                if not creds.anonymous:
                    return creds
    store = doc.get("credsStore")
    if isinstance(store, str) and store:
        return run_helper(store, host, env)
    return Credentials()


def find_credentials(
    host: str,
    explicit: Mapping[str, Credentials] | None = None,
    env: Mapping[str, str] | None = None,
) -> Credentials:
    """Credentials for registry ``host`` (see module docstring for the order)."""
    if explicit and host in explicit:
        return explicit[host]
    env = os.environ if env is None else env
    for path in _config_files(env):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            creds = _from_config(doc, host, env)
            if not creds.anonymous:
                return creds
    return Credentials()
