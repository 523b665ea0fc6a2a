"""Registry client behaviour that needs no registry: references, schemes, retries, errors.

The transport is httpx's MockTransport answering as distribution does; the real-registry
behaviour is covered in tests/integration/test_registry_*.py.
"""

from __future__ import annotations

import json

import httpx
import pytest

from jupyter_ktrain.errors import RegistryError, SpecError
from jupyter_ktrain.packaging.auth import Credentials, parse_challenge
from jupyter_ktrain.packaging.oci_client import BytesSource, RegistryClient
from jupyter_ktrain.packaging.reference import Reference
from jupyter_ktrain.packaging.registry_session import is_plain_http


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("ubuntu", ("registry-1.docker.io", "library/ubuntu", "", "")),
        ("docker.io/team/img:1.0", ("registry-1.docker.io", "team/img", "1.0", "")),
        ("nvcr.io/nvidia/pytorch:24.03-py3", ("nvcr.io", "nvidia/pytorch", "24.03-py3", "")),
        ("localhost:5000/a/b", ("localhost:5000", "a/b", "", "")),
        ("127.0.0.1:5000/a@sha256:" + "f" * 64, ("127.0.0.1:5000", "a", "", "sha256:" + "f" * 64)),
    ],
)
def test_references_parse_like_docker(text: str, want: tuple[str, str, str, str]) -> None:
    ref = Reference.parse(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == want


def test_bad_reference_names_the_option() -> None:
    with pytest.raises(SpecError, match=r"%ktrain config registry=\.\.\."):
        Reference.parse("Registry.example.com/Team/KTRAIN", what="registry")


def test_plain_http_only_for_loopback_or_listed_hosts() -> None:
    assert is_plain_http("127.0.0.1:5000")
    assert is_plain_http("localhost:5000")
    assert is_plain_http("[::1]:5000")
    assert not is_plain_http("registry.example.com")
    assert is_plain_http("registry.lan:5000", insecure=["registry.lan"])
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(str(req.url))
        return httpx.Response(404)

    with RegistryClient("registry.example.com", transport=httpx.MockTransport(handler)) as c:
        assert not c.blob_exists("a", "sha256:" + "0" * 64)
    assert seen[0].startswith("https://registry.example.com/v2/a/blobs/")


def test_challenge_parsing() -> None:
    ch = parse_challenge(
        'Bearer realm="https://auth.example.com/token",service="reg",scope="repository:a/b:pull,push"'
    )
    assert ch.scheme == "bearer"
    assert ch.params == {
        "realm": "https://auth.example.com/token",
        "service": "reg",
        "scope": "repository:a/b:pull,push",
    }
    assert parse_challenge('Basic realm="x"').scheme == "basic"


def test_429_waits_for_retry_after_then_succeeds() -> None:
    calls = iter([httpx.Response(429, headers={"Retry-After": "3"}), httpx.Response(200)])
    sleeps: list[float] = []
    client = RegistryClient(
        "127.0.0.1:1", transport=httpx.MockTransport(lambda r: next(calls)), sleep=sleeps.append
    )
    assert client.blob_exists("a", "sha256:" + "0" * 64)
    assert sleeps == [3.0]


def test_errors_keep_the_registry_code_and_say_what_to_do() -> None:
    body = {"errors": [{"code": "DENIED", "message": "requested access to the resource is denied"}]}
    client = RegistryClient(
        "127.0.0.1:1",
        transport=httpx.MockTransport(lambda r: httpx.Response(403, json=body)),
        sleep=lambda s: None,
    )
    with pytest.raises(RegistryError) as err:
        client.put_manifest("team/x", "t", b"{}", "application/json")
    assert err.value.code == "DENIED"
    assert err.value.status == 403
    assert not err.value.retryable
    assert "team/x" in str(err.value)
    assert "%ktrain config registry=" in str(err.value)


def test_quota_errors_say_so() -> None:
    body = {"errors": [{"code": "DENIED", "message": "storage quota exceeded"}]}
    client = RegistryClient(
        "127.0.0.1:1", transport=httpx.MockTransport(lambda r: httpx.Response(403, json=body))
    )
    with pytest.raises(RegistryError, match=r"quota .* used up"):
        client.put_manifest("team/x", "t", b"{}", "application/json")


def test_unauthorized_without_credentials_points_at_docker_login() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(401, headers={"WWW-Authenticate": 'Basic realm="r"'})

    client = RegistryClient("127.0.0.1:1", transport=httpx.MockTransport(handler))
    with pytest.raises(RegistryError, match=r"docker login 127\.0\.0\.1:1") as err:
        client.blob_exists("a", "sha256:" + "0" * 64)
    assert err.value.code == "UNAUTHORIZED"


def test_upload_url_keeps_its_state_query_when_the_digest_is_added() -> None:
    digest = "sha256:" + "a" * 64
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.method == "HEAD":
            return httpx.Response(404)
        if req.method == "POST":
            loc = "/v2/a/blobs/uploads/u1?_state=abc%3D%3D"
            return httpx.Response(202, headers={"Location": loc})
        return httpx.Response(201)

    client = RegistryClient("127.0.0.1:1", transport=httpx.MockTransport(handler))
    client.upload_blob("a", digest, BytesSource(b"data"))
    put = seen[-1]
    assert put.method == "PUT"
    assert put.url.params["_state"] == "abc=="
    assert put.url.params["digest"] == digest
    assert put.content == b"data"


def test_token_endpoint_over_plain_http_to_a_remote_host_is_refused() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        challenge = 'Bearer realm="http://auth.example.com/token",service="r"'
        return httpx.Response(401, headers={"WWW-Authenticate": challenge})

    client = RegistryClient(
        "registry.example.com",
        credentials=Credentials("u", "p"),
        transport=httpx.MockTransport(handler),
    )
    with pytest.raises(RegistryError, match="plain http"):
        client.blob_exists("a", "sha256:" + "0" * 64)


def test_identity_tokens_use_the_oauth_refresh_grant() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.path == "/token":
            return httpx.Response(200, json={"access_token": "tok"})
        if req.headers.get("Authorization") == "Bearer tok":
            return httpx.Response(200)
        ch = 'Bearer realm="https://registry.example.com/token",service="svc"'
        return httpx.Response(401, headers={"WWW-Authenticate": ch})

    client = RegistryClient(
        "registry.example.com",
        credentials=Credentials(identity_token="refresh-me"),
        transport=httpx.MockTransport(handler),
    )
    assert client.blob_exists("team/a", "sha256:" + "0" * 64)
    token_req = next(r for r in seen if r.url.path == "/token")
    assert token_req.method == "POST"
    form = dict(x.split("=", 1) for x in token_req.content.decode().split("&"))
    assert form["grant_type"] == "refresh_token"
    assert form["refresh_token"] == "refresh-me"
    assert json.dumps(form).count("repository%3Ateam%2Fa%3Apull") == 1
