"""A small OCI distribution-spec client over httpx (one registry host per client).

What it does, and why:

- auth: anonymous, Basic, Bearer (``WWW-Authenticate`` challenge -> token endpoint, token
  cached for the union of scopes asked so far); credentials from :mod:`.auth`.
- blobs: HEAD before upload; cross-repository mount (``201`` = 0 bytes moved, ``202`` = the
  mount was refused and the session is reused for a normal upload); monolithic PUT for small
  blobs; chunked PATCH with ``Content-Range`` for big ones, resuming after a broken connection
  from the ``Range`` the registry reports on ``GET <upload url>``; when the registry calls the
  session broken instead (distribution 2.8 does after a partial write), a fresh session starts.
- retries with exponential backoff on transport errors, 429 (``Retry-After`` honoured) and
  5xx; a failed finalizing PUT is followed by a HEAD (the blob may have landed) and otherwise
  a fresh upload session. Registries verify blob digests, and manifests are only PUT after all
  blobs are confirmed, so nothing corrupt is ever tagged.
- errors: :class:`~jupyter_ktrain.errors.RegistryError` with the registry's own code and a
  sentence saying what to do.
- plain http only for loopback hosts or hosts listed in ``insecure``.

The transport is injectable (``transport=httpx.MockTransport(...)`` or a wrapper) for tests.
"""

from __future__ import annotations

import functools
import ipaddress
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

import httpx

from ..errors import RegistryError
from .auth import Challenge, Credentials, parse_challenge
from .layer import sha256_digest
from .reference import Reference

__all__ = [
    "BlobSource",
    "BytesSource",
    "Progress",
    "Reference",
    "RegistryClient",
    "is_plain_http",
]

Progress = Callable[[int, int, str], None]
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# A session in these states is dead (distribution 2.8 refuses to resume after a partial PATCH
# wrote bytes its _state does not know about): start a fresh session.
_RESTART_CODES = frozenset({"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID", "NETWORK"})
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


class BlobSource(Protocol):
    """Random-access bytes of a blob being uploaded (re-readable for resume)."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, n: int) -> bytes: ...


@dataclass(frozen=True)
class BytesSource:
    """A blob held in memory."""

    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self, offset: int, n: int) -> bytes:
        return self.data[offset : offset + n]


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


def _join_query(url: str, key: str, value: str) -> str:
    """Append ``key=value`` keeping the URL's own query (``_state``) intact: httpx ``params=``
    would drop it."""
    return f"{url}{'&' if '?' in url else '?'}{key}={quote(value, safe='')}"


@functools.lru_cache(maxsize=1)
def _verified() -> ssl.SSLContext:
    """The TLS context that verifies registries (httpx's default: its CA bundle, or
    ``SSL_CERT_FILE``), made once per process: loading the CA bundle takes about 0.1 s, a
    third of a code push's time, were each push's client to load it again."""
    return httpx.create_ssl_context()


class RegistryClient:
    """Client for one registry host. Not thread-safe; cheap to create; ``close()`` when done."""

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

    def __enter__(self) -> RegistryClient:
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
            if retry and resp.status_code in _RETRY_STATUS and attempt < self.retries:
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
        retryable = status in _RETRY_STATUS
        return RegistryError(text.strip(), code=code, status=status, retryable=retryable)

    # -- manifests ---------------------------------------------------------------------------
    def get_manifest(self, repo: str, ref: str, accept: str) -> tuple[bytes, str]:
        """(bytes, media type) of ``repo:ref``; verified against ``ref`` when it is a digest."""
        resp = self.request(
            "GET", f"/v2/{repo}/manifests/{ref}", _pull(repo), headers={"Accept": accept}
        )
        if resp.status_code != 200:
            raise self.error(resp, f"give the manifest {repo}:{ref}", repo)
        data = resp.content
        if ref.startswith("sha256:") and sha256_digest(data) != ref:
            raise RegistryError(
                f"The manifest of {repo}@{ref} does not match its digest; refusing to use it.",
                code="DIGEST_INVALID",
            )
        return data, resp.headers.get("content-type", "").split(";")[0].strip()

    def manifest_digest(self, repo: str, ref: str, accept: str) -> str | None:
        """Digest ``repo:ref`` points at, or None when absent (HEAD, nothing downloaded)."""
        resp = self.request(
            "HEAD", f"/v2/{repo}/manifests/{ref}", _pull(repo), headers={"Accept": accept}
        )
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self.error(resp, f"look up {repo}:{ref}", repo)
        digest: str | None = resp.headers.get("docker-content-digest")
        return digest

    def put_manifest(self, repo: str, ref: str, data: bytes, media_type: str) -> str:
        """PUT a manifest under tag or digest ``ref``; returns its digest."""
        resp = self.request(
            "PUT",
            f"/v2/{repo}/manifests/{ref}",
            _push(repo),
            content=data,
            headers={"Content-Type": media_type},
        )
        if resp.status_code not in (200, 201, 202):
            raise self.error(resp, f"store the image manifest in {repo}", repo)
        return sha256_digest(data)

    # -- blobs -------------------------------------------------------------------------------
    def blob_exists(self, repo: str, digest: str) -> bool:
        resp = self.request("HEAD", f"/v2/{repo}/blobs/{digest}", _pull(repo))
        if resp.status_code in (200, 307):
            return True
        if resp.status_code == 404:
            return False
        raise self.error(resp, f"check for blob {digest[:19]} in {repo}", repo)

    def get_blob(self, repo: str, digest: str) -> bytes:
        """A whole blob, verified against its digest."""
        resp = self.request("GET", f"/v2/{repo}/blobs/{digest}", _pull(repo))
        if resp.status_code != 200:
            raise self.error(resp, f"give blob {digest[:19]} of {repo}", repo)
        if sha256_digest(resp.content) != digest:
            raise RegistryError(f"Blob {digest} of {repo} is corrupt.", code="DIGEST_INVALID")
        return resp.content

    def open_blob(self, repo: str, digest: str, size: int) -> RemoteBlob:
        """A :class:`BlobSource` streaming ``digest`` from this registry (for copies)."""
        return RemoteBlob(self, repo, digest, size)

    def start_upload(self, repo: str, mount_from: str = "", digest: str = "") -> str | None:
        """POST an upload session; None when ``mount_from`` mounted the blob (201)."""
        path = f"/v2/{repo}/blobs/uploads/"
        scopes = _push(repo)
        if mount_from:
            path = _join_query(_join_query(path, "mount", digest), "from", mount_from)
            scopes = [*scopes, *_pull(mount_from)]
        resp = self.request("POST", path, scopes, headers={"Content-Length": "0"})
        if resp.status_code == 201 and mount_from:
            return None
        if resp.status_code != 202 or "location" not in resp.headers:
            raise self.error(resp, f"start an upload to {repo}", repo)
        return self._url(resp.headers["location"])

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Cross-repository mount; True when the registry linked it (0 bytes moved)."""
        location = self.start_upload(repo, mount_from=from_repo, digest=digest)
        if location is None:
            return True
        self.request("DELETE", location, _push(repo), retry=False)  # drop the unused session
        return False

    def upload_blob(
        self,
        repo: str,
        digest: str,
        source: BlobSource,
        *,
        progress: Progress | None = None,
        what: str = "",
        check: bool = True,
    ) -> int:
        """Upload ``source`` as ``digest`` unless present; returns bytes sent (0 if present).
        ``check=False`` skips the first HEAD (the caller just did it).

        Whole-session retries: a session that fails is checked with HEAD (it may have landed)
        and otherwise replaced by a fresh one, at most ``retries`` times.
        """
        if check and self.blob_exists(repo, digest):
            return 0
        before = self.bytes_sent
        last: RegistryError | None = None
        for attempt in range(self.retries + 1):
            try:
                location = self.start_upload(repo)
                assert location is not None
                self._upload_session(repo, location, digest, source, progress, what)
                return self.bytes_sent - before
            except RegistryError as exc:
                if not exc.retryable and exc.code not in _RESTART_CODES:
                    raise
                last = exc
            if self.blob_exists(repo, digest):
                return self.bytes_sent - before
            self._sleep(self.backoff * 2**attempt)
        assert last is not None
        raise last

    def _upload_session(
        self,
        repo: str,
        location: str,
        digest: str,
        source: BlobSource,
        progress: Progress | None,
        what: str,
    ) -> None:
        size = source.size
        if size <= self.chunk_size:
            body = source.read(0, size)
            resp = self.request(
                "PUT",
                _join_query(location, "digest", digest),
                _push(repo),
                retry=False,
                content=body,
                headers={"Content-Type": "application/octet-stream"},
            )
        else:
            location = self._patch_chunks(repo, location, source, progress, what)
            resp = self.request(
                "PUT",
                _join_query(location, "digest", digest),
                _push(repo),
                retry=False,
                headers={"Content-Length": "0"},
            )
        if resp.status_code != 201:
            raise self.error(resp, f"accept blob {digest[:19]} in {repo}", repo)
        if progress:
            progress(size, size, what)

    def _patch_chunks(
        self, repo: str, location: str, source: BlobSource, progress: Progress | None, what: str
    ) -> str:
        """PATCH ``source`` in chunks; after a broken connection ask the registry how much it
        has (``GET location`` -> ``Range: 0-N``) and go on from N+1. Returns the last URL."""
        offset, failures = 0, 0
        while offset < source.size:
            chunk = source.read(offset, self.chunk_size)
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Range": f"{offset}-{offset + len(chunk) - 1}",
            }
            try:
                resp = self.request(
                    "PATCH", location, _push(repo), retry=False, content=chunk, headers=headers
                )
            except RegistryError:
                resp = None
            if resp is not None and resp.status_code == 202:
                location = self._url(resp.headers.get("location", location))
                offset = _range_end(resp, offset + len(chunk))
                failures = 0
                if progress:
                    progress(offset, source.size, what)
                continue
            if resp is not None and resp.status_code not in _RETRY_STATUS | {416}:
                raise self.error(resp, f"take a chunk of the upload to {repo}", repo)
            failures += 1
            if failures > self.retries:
                raise RegistryError(
                    f"The upload to {self.registry}/{repo} kept breaking at byte {offset}; "
                    "nothing was tagged. Check the network and run again.",
                    code="NETWORK",
                    retryable=True,
                )
            self._sleep(self.backoff * 2 ** (failures - 1))
            location, offset = self._upload_status(repo, location)
        return location

    def _upload_status(self, repo: str, location: str) -> tuple[str, int]:
        """Where the registry's upload session stands: (url, next offset)."""
        resp = self.request("GET", location, _push(repo))
        if resp.status_code != 204:
            raise self.error(resp, f"report the state of the upload to {repo}", repo)
        return self._url(resp.headers.get("location", location)), _range_end(resp, 0)


def _range_end(resp: httpx.Response, default: int) -> int:
    """Next offset from a ``Range: 0-N`` header (N inclusive). Distribution answers ``0-0`` for
    an empty session, so ``0-0`` counts as nothing stored."""
    value = resp.headers.get("range", "")
    if "-" not in value:
        return default
    end = int(value.rsplit("-", 1)[1])
    return end + 1 if end > 0 else 0


class RemoteBlob:
    """A blob read sequentially from a registry; re-opened with ``Range`` after a seek."""

    def __init__(self, client: RegistryClient, repo: str, digest: str, size: int):
        self.client, self.repo, self.digest, self.size = client, repo, digest, size
        self._pos = -1
        self._iter: Iterator[bytes] | None = None
        self._resp: httpx.Response | None = None
        self._buf = b""

    def _open(self, offset: int) -> None:
        self.close()
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        path = f"/v2/{self.repo}/blobs/{self.digest}"
        resp = self.client.request("GET", path, _pull(self.repo), headers=headers, stream=True)
        if resp.status_code not in (200, 206):
            raise self.client.error(resp, f"give blob {self.digest[:19]}", self.repo)
        self._buf, self._pos = b"", offset if resp.status_code == 206 else 0
        self._resp, self._iter = resp, resp.iter_bytes(1 << 20)
        while self._pos < offset:  # no Range support: skip ahead
            piece = next(self._iter)
            take = min(len(piece), offset - self._pos)
            self._pos += take
            self._buf = piece[take:]

    def read(self, offset: int, n: int) -> bytes:
        if self._iter is None or offset != self._pos:
            self._open(offset)
        assert self._iter is not None
        out, have = [self._buf], len(self._buf)
        for piece in self._iter:
            out.append(piece)
            have += len(piece)
            if have >= n:
                break
        data = b"".join(out)
        self._buf, data = data[n:], data[:n]
        self._pos = offset + len(data)
        return data

    def close(self) -> None:
        if self._resp is not None:
            self._resp.close()
        self._resp = self._iter = None


def _pull(repo: str) -> list[str]:
    return [f"repository:{repo}:pull"]


def _push(repo: str) -> list[str]:
    return [f"repository:{repo}:pull,push"]
