"""A small OCI distribution-spec client over httpx (one registry host per client).

What it does, and why:

- auth, retries, errors and plain http: the session below it (:mod:`.registry_session`).
- blobs: HEAD before upload; cross-repository mount (``201`` = 0 bytes moved, ``202`` = the
  mount was refused and the session is reused for a normal upload); monolithic PUT for small
  blobs; chunked PATCH with ``Content-Range`` for big ones, resuming after a broken connection
  from the ``Range`` the registry reports on ``GET <upload url>``; when the registry calls the
  session broken instead (distribution 2.8 does after a partial write), a fresh session starts.
- a failed finalizing PUT is followed by a HEAD (the blob may have landed) and otherwise a
  fresh upload session. Registries verify blob digests, and manifests are only PUT after all
  blobs are confirmed, so nothing corrupt is ever tagged.

The transport is injectable (``transport=httpx.MockTransport(...)`` or a wrapper) for tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

import httpx

from ..errors import RegistryError
from .layer import sha256_digest
from .reference import Reference
from .registry_session import RETRY_STATUS, RegistrySession

__all__ = [
    "BlobSource",
    "BytesSource",
    "Progress",
    "Reference",
    "RegistryClient",
]

Progress = Callable[[int, int, str], None]
# A session in these states is dead (distribution 2.8 refuses to resume after a partial PATCH
# wrote bytes its _state does not know about): start a fresh session.
_RESTART_CODES = frozenset({"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID", "NETWORK"})


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


def _join_query(url: str, key: str, value: str) -> str:
    """Append ``key=value`` keeping the URL's own query (``_state``) intact: httpx ``params=``
    would drop it."""
    return f"{url}{'&' if '?' in url else '?'}{key}={quote(value, safe='')}"


class RegistryClient(RegistrySession):
    """Client for one registry host: manifests and blobs over its :class:`RegistrySession`.
    Not thread-safe; cheap to create; ``close()`` when done."""

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
            if resp is not None and resp.status_code not in RETRY_STATUS | {416}:
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
