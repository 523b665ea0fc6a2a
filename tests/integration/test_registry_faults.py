"""Faults between us and a real registry: broken connections, 5xx, 429, token challenges.

Every push either completes with an image the registry verified, or fails with a clear
RegistryError, and in that case no tag points at anything.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from jupyter_ktrain.errors import RegistryError
from jupyter_ktrain.packaging.image import MANIFEST_ACCEPT
from jupyter_ktrain.packaging.layer import LayerCache, sha256_digest
from jupyter_ktrain.packaging.oci_client import BytesSource, RegistryClient
from jupyter_ktrain.packaging.push import content_tag, push_code_image
from jupyter_ktrain.packaging.reference import Reference

from .registry_tools import Fault, FaultProxy, Registry

FAST = {"backoff": 0.01, "chunk_size": 64 << 10}
FILES = {"program.py": b"print('faults')\n", "blob.bin": os.urandom(300 << 10)}


def _push(base: str, target: str, tmp: Path, **kw: object) -> object:
    return push_code_image(
        base, target, FILES, cache=LayerCache(tmp / "cache"), client_options=FAST, **kw
    )


def _tags(host: str, repo: str) -> list[str]:
    resp = httpx.get(f"http://{host}/v2/{repo}/tags/list")
    return list(resp.json().get("tags") or []) if resp.status_code == 200 else []


@pytest.mark.slow
def test_connection_dropped_mid_chunk_resumes_from_the_registry_range(
    registry: Registry, base_image: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.faults.append(Fault("PATCH", "/blobs/uploads/", drop=True, after=1))
    result = _push(base_image.replace(registry.host, proxy.host), f"{proxy.host}/f/drop", tmp_path)
    assert any(status == 0 for _, _, status in proxy.state.log)  # the drop happened
    gets = [m for m, p, _ in proxy.state.log if m == "GET" and "/blobs/uploads/" in p]
    assert gets  # asked the registry where to resume
    assert result.uploaded  # type: ignore[attr-defined]
    ref = Reference.parse(result.reference)  # type: ignore[attr-defined]
    with RegistryClient(registry.host) as client:  # verified by digest on read
        client.get_manifest(ref.repository, ref.digest, MANIFEST_ACCEPT)
        assert client.get_blob(ref.repository, result.layer_digest)  # type: ignore[attr-defined]


@pytest.mark.slow
def test_500_then_201_on_the_final_put_completes(
    registry: Registry, base_image: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.faults.append(Fault("PUT", "/blobs/uploads/", status=500))
    proxy.faults.append(Fault("PUT", "/manifests/", status=503, retry_after="0"))
    result = _push(base_image.replace(registry.host, proxy.host), f"{proxy.host}/f/five", tmp_path)
    assert [s for _, _, s in proxy.state.log].count(500) == 1
    assert result.uploaded  # type: ignore[attr-defined]
    assert _tags(registry.host, "f/five") == [result.tag]  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_registry_that_keeps_failing_fails_clearly_and_tags_nothing(
    registry: Registry, base_image: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    proxy.faults.append(Fault("PUT", "/manifests/", status=500, times=100))
    with pytest.raises(RegistryError, match="failed on its side") as err:
        _push(base_image.replace(registry.host, proxy.host), f"{proxy.host}/f/down", tmp_path)
    assert err.value.retryable
    assert _tags(registry.host, "f/down") == []


@pytest.mark.slow
def test_corrupted_uploads_are_rejected_by_the_registry_and_never_tagged(
    registry: Registry, tmp_path: Path
) -> None:
    class Corrupt(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.method == "PUT" and "/blobs/uploads/" in request.url.path:
                body = bytearray(request.read())
                if body:
                    body[0] ^= 0xFF
                headers = dict(request.headers)
                request = httpx.Request(
                    request.method, request.url, headers=headers, content=bytes(body)
                )
            return self.inner.handle_request(request)

        def close(self) -> None:
            self.inner.close()

    data = b"precious bytes"
    client = RegistryClient(registry.host, transport=Corrupt(), backoff=0.01)
    with client, pytest.raises(RegistryError) as err:
        client.upload_blob("f/corrupt", sha256_digest(data), BytesSource(data))
    assert err.value.code == "DIGEST_INVALID"
    assert "nothing was tagged" in str(err.value)
    with RegistryClient(registry.host) as client:
        assert not client.blob_exists("f/corrupt", sha256_digest(data))


@pytest.mark.slow
def test_401_with_a_token_challenge_gets_a_token_and_completes(
    registry: Registry, base_image: str, tmp_path: Path
) -> None:
    from jupyter_ktrain.packaging.auth import Credentials

    with FaultProxy(registry.host, token="tok-123", users={"ann": "pw"}) as proxy:
        base = base_image.replace(registry.host, proxy.host)
        target = f"{proxy.host}/f/token"
        with pytest.raises(RegistryError, match="docker login") as err:
            _push(base, target, tmp_path)  # anonymous: the token endpoint refuses
        assert err.value.code == "UNAUTHORIZED"
        creds = {proxy.host: Credentials("ann", "pw")}
        result = _push(base, target, tmp_path, credentials=creds)
        assert proxy.state.token_requests >= 1
        assert len(result.mounted) == 2  # type: ignore[attr-defined]
    assert _tags(registry.host, "f/token") == [content_tag(result.digest)]  # type: ignore[attr-defined]
