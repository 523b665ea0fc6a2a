"""Append the job's code as one layer to a base image and push it, no Docker daemon.

``push_code_image(base, target_repo, files)``:

1. read the base manifest (an index picks ``platform``) and config from the base registry;
2. plan requirements (:mod:`.requirements`) and build the deterministic code layer;
3. append it (:func:`.image.append_layer`); the tag is derived from the new manifest digest;
4. if the target already has that tag at that digest: nothing to do (0 bytes);
5. otherwise make every base blob present in the target: HEAD, then cross-repository mount
   when the base lives on the same registry (0 bytes), else a streamed copy with progress;
6. upload the code layer and config (HEAD first), and PUT the manifest last.

The result pins the image by digest (``PushResult.reference``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..errors import PackagingError
from .auth import Credentials, find_credentials
from .image import INDEX_TYPES, MANIFEST_ACCEPT, Image, append_layer, select_platform
from .layer import LayerCache, build_layer, code_files
from .oci_client import BytesSource, Progress, RegistryClient
from .push_progress import human_bytes
from .reference import Reference
from .requirements import RequirementsPlan, plan_requirements

__all__ = ["PushResult", "content_tag", "fetch_image", "push_code_image"]


@dataclass(frozen=True)
class PushResult:
    """What a push did. ``reference`` is ``registry/repo@sha256:...`` (use it in pod specs)."""

    reference: str
    digest: str
    tag: str
    layer_digest: str
    bytes_uploaded: int
    blob_bytes_uploaded: int
    uploaded: bool
    requirements: RequirementsPlan
    mounted: tuple[str, ...] = ()
    copied: tuple[str, ...] = ()
    present: tuple[str, ...] = ()
    pushed: tuple[str, ...] = field(default_factory=tuple)

    @property
    def requirements_route(self) -> str:
        return self.requirements.route

    def message(self) -> str:
        """One or two sentences for the notebook."""
        if not self.uploaded:
            head = f"Nothing uploaded: the code is unchanged and {self.reference} is in place."
        else:
            parts = [f"{human_bytes(self.bytes_uploaded)} uploaded"]
            if self.mounted:
                parts.append(f"{len(self.mounted)} base layer(s) mounted")
            if self.copied:
                parts.append(f"{len(self.copied)} base layer(s) copied")
            head = f"Pushed {self.reference} ({', '.join(parts)})."
        return f"{head} {self.requirements.describe()}"


def content_tag(digest: str) -> str:
    """Tag that names a manifest by its content (keeps it from garbage collection)."""
    return "ktrain-" + digest.split(":", 1)[1][:16]


def fetch_image(client: RegistryClient, ref: Reference, platform: str) -> Image:
    """Manifest + config of ``ref`` (index -> the ``platform`` manifest), verified."""
    data, media_type = client.get_manifest(ref.repository, ref.ref, MANIFEST_ACCEPT)
    manifest = json.loads(data)
    if (manifest.get("mediaType") or media_type) in INDEX_TYPES or "manifests" in manifest:
        desc = select_platform(manifest, platform)
        data, media_type = client.get_manifest(ref.repository, desc["digest"], MANIFEST_ACCEPT)
        manifest = json.loads(data)
    config_digest = manifest.get("config", {}).get("digest", "")
    if not config_digest:
        raise PackagingError(f"The base image {ref} has no config; is it a schema 1 image?")
    config = client.get_blob(ref.repository, config_digest)
    return Image.parse(data, config, media_type)


class _Aggregate:
    """Turns per-blob progress into whole-push progress."""

    def __init__(self, callback: Progress | None, total: int):
        self.callback, self.total, self.base = callback, total, 0

    def for_blob(self, size: int, what: str) -> Progress:
        start = self.base
        self.base += size

        def report(done: int, _total: int, _what: str) -> None:
            if self.callback:
                self.callback(min(start + done, self.total), self.total, what)

        return report


def _clients(
    base: Reference,
    target: Reference,
    *,
    credentials: Mapping[str, Credentials] | None,
    insecure: Sequence[str],
    transport: httpx.BaseTransport | None,
    options: Mapping[str, Any],
) -> tuple[RegistryClient, RegistryClient]:
    def make(host: str) -> RegistryClient:
        creds = find_credentials(host, credentials)
        kw: dict[str, Any] = dict(options)
        return RegistryClient(host, credentials=creds, insecure=insecure, transport=transport, **kw)

    target_client = make(target.registry)
    if base.registry == target.registry:
        return target_client, target_client
    return make(base.registry), target_client


def _upload_missing(
    base_client: RegistryClient,
    client: RegistryClient,
    base: Reference,
    repo: str,
    image: Image,
    progress: Progress | None,
) -> dict[str, list[str]]:
    """Make every blob of ``image`` present in ``repo``; returns digests by what happened:
    ``present`` (already there), ``mounted`` (0 bytes), ``copied`` (from the base registry),
    ``pushed`` (our own layer and config)."""
    own = {d: data for d, data in image.layers_data.items()}
    own[image.config_digest] = image.config_bytes
    blobs = [(str(d["digest"]), int(d["size"])) for d in image.layers if not d.get("urls")]
    blobs.append((image.config_digest, len(image.config_bytes)))
    done: dict[str, list[str]] = {"present": [], "mounted": [], "copied": [], "pushed": []}
    missing = []
    for digest, size in blobs:
        if client.blob_exists(repo, digest):
            done["present"].append(digest)
        elif digest not in own and base_client is client and base.repository != repo:
            if client.mount_blob(repo, digest, base.repository):
                done["mounted"].append(digest)
            else:
                missing.append((digest, size))
        else:
            missing.append((digest, size))
    agg = _Aggregate(progress, sum(s for _, s in missing))
    for digest, size in missing:
        if digest in own:
            what = "code layer" if digest != image.config_digest else "image config"
            report = agg.for_blob(size, what)
            client.upload_blob(
                repo, digest, BytesSource(own[digest]), progress=report, what=what, check=False
            )
            done["pushed"].append(digest)
            continue
        what = f"base layer {digest[7:19]}"
        source = base_client.open_blob(base.repository, digest, size)
        try:
            client.upload_blob(
                repo, digest, source, progress=agg.for_blob(size, what), what=what, check=False
            )
        finally:
            source.close()
        done["copied"].append(digest)
    return done


def push_code_image(
    base: str,
    target_repo: str,
    files: Mapping[str, bytes],
    *,
    modes: Mapping[str, int] | None = None,
    env: Mapping[str, str] | None = None,
    requirements: Iterable[str] = (),
    offline: bool = False,
    provided: Iterable[str] = (),
    pip_args: Sequence[str] = (),
    python_version: str | None = None,
    platform: str = "linux/amd64",
    insecure: Sequence[str] = (),
    credentials: Mapping[str, Credentials] | None = None,
    progress: Progress | None = None,
    transport: httpx.BaseTransport | None = None,
    cache: LayerCache | None = None,
    include_runner: bool = True,
    client_options: Mapping[str, Any] | None = None,
) -> PushResult:
    """Push ``base`` + one code layer to ``target_repo``; see the module docstring.

    ``files``: code-dir-relative paths (``"program.py"``, ``"ds_config.json"``) or absolute
    image paths -> bytes. The runner library goes to ``/ktrain/lib`` unless
    ``include_runner=False``. ``env`` is added to the image config (``PYTHONPATH`` is always
    prepended with ``/ktrain/lib``). ``requirements``: pinned lines; ``offline=True`` ships
    wheels. ``insecure``: hosts allowed over plain http besides loopback. ``credentials``:
    per-host overrides of the docker config lookup. ``progress(done, total, what)``.
    Raises :class:`~jupyter_ktrain.errors.RegistryError` / ``PackagingError``.
    """
    base_ref = Reference.parse(base, what="base_image")
    target = Reference.parse(target_repo, what="registry")
    repo = target.repository
    cache = cache if cache is not None else LayerCache()
    base_client, client = _clients(
        base_ref,
        target,
        credentials=credentials,
        insecure=insecure,
        transport=transport,
        options=client_options or {},
    )
    try:
        image = fetch_image(base_client, base_ref, platform)
        plan = plan_requirements(
            requirements,
            offline=offline,
            provided=provided,
            platform=platform,
            python_version=python_version,
            pip_args=pip_args,
            cache=cache,
        )
        all_files = code_files({**files, **plan.files}, include_runner=include_runner)
        layer = build_layer(all_files, modes)
        cache.put(layer.data)
        new = append_layer(image, layer, env=env)
        tag = content_tag(new.digest)
        ref = target.with_digest(new.digest)

        def result(sent: int, blob_sent: int, **kw: Any) -> PushResult:
            return PushResult(
                str(ref), new.digest, tag, layer.digest, sent, blob_sent, sent > 0, plan, **kw
            )

        if client.manifest_digest(repo, tag, new.media_type) == new.digest:
            return result(0, 0)
        before = client.bytes_sent
        done = _upload_missing(base_client, client, base_ref, repo, new, progress)
        blob_sent = client.bytes_sent - before
        client.put_manifest(repo, tag, new.manifest_bytes, new.media_type)
        return result(
            client.bytes_sent - before,
            blob_sent,
            **{k: tuple(v) for k, v in done.items()},
        )
    finally:
        client.close()
        if base_client is not client:
            base_client.close()
