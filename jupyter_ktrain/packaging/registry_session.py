"""The HTTP side of the registry client (:mod:`.oci_client`): one registry host over httpx.

- auth: anonymous, Basic, Bearer (``WWW-Authenticate`` challenge -> token endpoint, token
  cached for the union of scopes asked so far); credentials from :mod:`.auth`.
- retries with exponential backoff on transport errors, 429 (``Retry-After`` honoured) and
  5xx.
- errors: :class:`~jupyter_ktrain.errors.RegistryError` with the registry's own code and a
  sentence saying what to do.
- plain http only for loopback hosts or hosts listed in ``insecure``; TLS verified otherwise
  (the context made once per process).

The transport is injectable (``transport=httpx.MockTransport(...)`` or a wrapper) for tests.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import httpx

from ..errors import RegistryError
from .auth import Challenge, Credentials, parse_challenge

__all__ = ["RETRY_STATUS", "RegistrySession", "is_plain_http"]

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_HINTS = {
    "UNAUTHORIZED": "Check the registry credentials: `docker login {host}` (docker config.json "
    "or a credential helper) or set them with `%ktrain config`.",
    "DENIED": "Your account may not do this on {repo}: ask for push rights or pick another "
    "repository with `%ktrain config registry=...`.",
    "NAME_UNKNOWN": "The repository {repo} does not exist on {host}: check the name given to "
    "`%ktrain config registry=...` / `base_image=...`.",
    "NAME_INVALID": "{repo} is not a valid repository name (lower case, digits, '._-/').",
    "MANIFEST_UNKNOWN": "No such tag or digest in {repo}: check `%ktrain config base_image=...`.",
    "BLOB_UNKNOWN": "A blob is missing from {repo}; the image may be partly deleted.",
    "DIGEST_INVALID": "The data was corrupted in transit; nothing was tagged. Run the cell again.",
    "BLOB_UPLOAD_INVALID": "The upload session broke; nothing was tagged. Run the cell again.",
    "BLOB_UPLOAD_UNKNOWN": "The upload session expired; nothing was tagged. Run the cell again.",
    "MANIFEST_INVALID": "The registry rejected the image manifest; nothing was tagged.",
    "MANIFEST_BLOB_UNKNOWN": "The registry lost a blob before the manifest was written; run the "
    "cell again.",
    "TOOMANYREQUESTS": "The registry is rate limiting; wait a minute and run again.",
    "QUOTA": "The registry quota for {repo} is used up: delete old images or ask for more space.",
    "UNSUPPORTED": "The registry does not support this operation.",
}


def _hostname(host: str) -> str:
    """``host[:port]`` / ``[v6]:port`` -> bare host name or address."""
    if host.startswith("["):
        return host[1 : host.index("]")]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_loopback(host: str) -> bool:
    name = _hostname(host)
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_plain_http(host: str, insecure: Iterable[str] = ()) -> bool:
    """True when ``host`` may be spoken to over plain http: loopback or listed as insecure."""
    listed = set(insecure)
    return _is_loopback(host) or host in listed or _hostname(host) in listed


def _retry_after(resp: httpx.Response, default: float) -> float:
    value = resp.headers.get("Retry-After", "")
    try:
        return min(max(float(value), 0.0), 120.0)
    except ValueError:
        return default


@functools.lru_cache(maxsize=1)
def _verified() -> ssl.SSLContext:
    """The TLS context that verifies registries (httpx's default: its CA bundle, or
    ``SSL_CERT_FILE``), made once per process: loading the CA bundle takes about 0.1 s, a
    third of a code push's time, were each push's client to load it again."""
    return httpx.create_ssl_context()


_Session = TypeVar("_Session", bound="RegistrySession")


class RegistrySession:
    """Authenticated requests to one registry host, with retries; the errors it answers as
    :class:`~jupyter_ktrain.errors.RegistryError`. Not thread-safe; ``close()`` when done."""

    def __init__(
        self,
        registry: str,
        *,
        credentials: Credentials | None = None,
        insecure: Iterable[str] = (),
        transport: httpx.BaseTransport | None = None,
        retries: int = 5,
        backoff: float = 0.5,
        chunk_size: int = 16 << 20,
        timeout: float = 120.0,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.registry = registry
        self.insecure = tuple(insecure)
        scheme = "http" if is_plain_http(registry, self.insecure) else "https"
        self.base = f"{scheme}://{registry}"
        self.credentials = credentials or Credentials()
        self.retries, self.backoff, self.chunk_size, self._sleep = (
            retries,
            backoff,
            chunk_size,
            sleep,
        )
        self._http = httpx.Client(
            transport=transport, timeout=timeout, follow_redirects=True, verify=_verified()
        )
        self._authorization = ""
        self._scopes: set[str] = set()
        self.bytes_sent = 0

    def close(self) -> None:
        self._http.close()

    def __enter__(self: _Session) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport, auth, retries ------------------------------------------------------------
    def _url(self, path_or_url: str) -> str:
        return str(httpx.URL(self.base).join(path_or_url))

    def _send(
        self, method: str, url: str, content: bytes | None, headers: dict[str, str], stream: bool
    ) -> httpx.Response:
        headers = dict(headers)
        if self._authorization:
            headers["Authorization"] = self._authorization
        if content:
            self.bytes_sent += len(content)
        req = self._http.build_request(method, url, content=content, headers=headers)
        resp = self._http.send(req, stream=stream)
        if stream and resp.status_code >= 300:
            resp.read()
        return resp

    def request(
        self,
        method: str,
        path_or_url: str,
        scopes: Sequence[str],
        *,
        retry: bool = True,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """One request with auth (answers 401 challenges once) and retries (if ``retry``)."""
        url = self._url(path_or_url)
        authed = False
        attempt = 0
        while True:
            try:
                resp = self._send(method, url, content, headers or {}, stream)
            except httpx.TransportError as exc:
                if not retry or attempt >= self.retries:
                    raise RegistryError(
                        f"Could not reach the registry {self.registry} ({type(exc).__name__}: "
                        f"{exc}). Check the address in `%ktrain config registry=...` and the "
                        "network.",
                        code="NETWORK",
                        retryable=True,
                    ) from exc
                self._sleep(self.backoff * 2**attempt)
                attempt += 1
                continue
            if resp.status_code == 401 and not authed and "www-authenticate" in resp.headers:
                authed = True
                self._authenticate(parse_challenge(resp.headers["www-authenticate"]), scopes)
                continue
            if retry and resp.status_code in RETRY_STATUS and attempt < self.retries:
                self._sleep(_retry_after(resp, self.backoff * 2**attempt))
                attempt += 1
                continue
            return resp

    def _authenticate(self, challenge: Challenge, scopes: Sequence[str]) -> None:
        if challenge.scheme == "basic":
            if self.credentials.anonymous or self.credentials.identity_token:
                raise self._unauthorized("needs a user name and password")
            self._authorization = self.credentials.basic_header()
            return
        if challenge.scheme != "bearer" or "realm" not in challenge.params:
            raise self._unauthorized(f"asks for unsupported auth {challenge.scheme!r}")
        self._scopes.update(scopes)
        if challenge.params.get("scope"):
            self._scopes.update(challenge.params["scope"].split(" "))
        self._authorization = "Bearer " + self._fetch_token(challenge.params)

    def _unauthorized(self, why: str) -> RegistryError:
        hint = _HINTS["UNAUTHORIZED"].format(host=self.registry, repo="")
        return RegistryError(
            f"The registry {self.registry} {why}. {hint}", code="UNAUTHORIZED", status=401
        )

    def _fetch_token(self, params: Mapping[str, str]) -> str:
        realm = params["realm"]
        realm_host = httpx.URL(realm).netloc.decode()
        if httpx.URL(realm).scheme != "https" and not is_plain_http(realm_host, self.insecure):
            raise self._unauthorized(f"sends its token endpoint over plain http ({realm})")
        query: list[tuple[str, str | int | float | bool | None]] = [
            ("service", params.get("service", ""))
        ]
        query += [("scope", s) for s in sorted(self._scopes)]
        creds = self.credentials
        try:
            if creds.identity_token:
                form = dict(query[:1])
                form |= {"grant_type": "refresh_token", "refresh_token": creds.identity_token}
                form |= {"client_id": "jupyter-ktrain", "scope": " ".join(sorted(self._scopes))}
                resp = self._http.post(realm, data=form)
            else:
                headers = {} if creds.anonymous else {"Authorization": creds.basic_header()}
                resp = self._http.get(realm, params=query, headers=headers)
        except httpx.TransportError as exc:
            raise self._unauthorized(f"token endpoint {realm} is unreachable ({exc})") from exc
        if resp.status_code != 200:
            raise self._unauthorized(f"token endpoint refused the credentials ({resp.status_code})")
        try:
            body = resp.json()
            return str(body.get("token") or body["access_token"])
        except (ValueError, KeyError) as exc:
            raise self._unauthorized("token endpoint gave no token") from exc

    def error(self, resp: httpx.Response, what: str, repo: str = "") -> RegistryError:
        """A RegistryError from a failed response: the registry's code + what to do."""
        code, message = "", ""
        try:
            errors = resp.json().get("errors") or []
            if errors:
                code, message = str(errors[0].get("code", "")), str(errors[0].get("message", ""))
        except (ValueError, AttributeError):
            message = resp.text[:200]
        status = resp.status_code
        if not code:
            code = {401: "UNAUTHORIZED", 403: "DENIED", 404: "NAME_UNKNOWN"}.get(status, "")
            code = code or ("TOOMANYREQUESTS" if status == 429 else f"HTTP_{status}")
        hint_key = "QUOTA" if status == 413 or "quota" in message.lower() else code
        hint = _HINTS.get(hint_key, "")
        if not hint and status >= 500:
            hint = "The registry failed on its side; try again in a moment."
        text = f"The registry {self.registry} refused to {what}: {code}"
        text += f" ({message})." if message else "."
        text += " " + hint.format(host=self.registry, repo=repo or "the repository")
        retryable = status in RETRY_STATUS
        return RegistryError(text.strip(), code=code, status=status, retryable=retryable)
