"""Benchmark: append a ~100 KB code change to a few-hundred-MB base image, ours vs buildah.

Same run, same local registry (Debian's docker-registry on 127.0.0.1), same base image, every
byte counted by the same proxy:

  (a) ``push_code_image``: read base manifest/config, build the layer, mount base layers,
      upload layer + config, PUT manifest;
  (b) buildah (vfs storage, chroot isolation): ``FROM base`` + ``COPY`` + push;
  (c) ours again with nothing changed: must move 0 blob bytes.

Each of ``--rounds`` rounds (default 5) pushes a new version of the code with both, in turn
(so both see the same machine load); the figures are the medians. A single push of ours takes
a few hundred milliseconds, so one sample moves by a third with the load of the moment.

Usage: python bench/push.py [--base-mb 300] [--code-kb 100] [--rounds 5]
The last line is one JSON object with each figure and its goal.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_ktrain.packaging.layer import LayerCache, code_files, gzip_deterministic
from jupyter_ktrain.packaging.push import push_code_image
from tests.integration.registry_tools import (
    FaultProxy,
    push_base_image,
    start_registry,
)


def _random_layer(mb: int, seed: int) -> bytes:
    """A gzip'd tar with one incompressible file of ``mb`` MB."""
    import io
    import random
    import tarfile

    rnd = random.Random(seed)
    data = rnd.randbytes(mb << 20)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(f"opt/big/blob{seed}.bin")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return gzip_deterministic(buf.getvalue(), level=1)


def _code(kb: int, version: int) -> dict[str, bytes]:
    return {
        "program.py": f"print('version {version}')\n".encode(),
        "data/weights.bin": os.urandom(kb << 10),
    }


def _buildah(
    tmp: Path, base: str, target: str, files: dict[str, bytes], storage: str = "storage"
) -> float:
    ctx = tmp / "ctx"
    for path, data in code_files(files).items():  # the same tree our layer holds
        (ctx / "code" / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (ctx / "code" / path.lstrip("/")).write_bytes(data)
    (ctx / "Containerfile").write_text(
        f"FROM {base}\nCOPY code/ /\nWORKDIR /ktrain\nENV PYTHONPATH=/ktrain/lib\n"
    )
    env = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}
    store = ["--root", str(tmp / storage), "--runroot", str(tmp / f"run-{storage}")]
    t0 = time.perf_counter()
    for argv in (
        ["buildah", *store, "build", "--tls-verify=false", "-q", "-t", "bench-img", str(ctx)],
        ["buildah", *store, "push", "--tls-verify=false", "-q", "bench-img", f"docker://{target}"],
    ):
        subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-mb", type=int, default=300)
    ap.add_argument("--code-kb", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ktrain-bench-") as tmpdir:
        tmp = Path(tmpdir)
        reg = start_registry(tmp / "registry")
        try:
            with FaultProxy(reg.host) as proxy:
                figures = _run(args, tmp, reg.host, proxy)
        finally:
            reg.stop()
            for storage in sorted(tmp.glob("storage*")):
                run = str(tmp / f"run-{storage.name}")
                subprocess.run(
                    ["buildah", "--root", str(storage), "--runroot", run, "rm", "-a"],
                    capture_output=True,
                    env={**os.environ, "STORAGE_DRIVER": "vfs"},
                )
    print(json.dumps(figures))


def _run(
    args: argparse.Namespace, tmp: Path, registry: str, proxy: FaultProxy
) -> dict[str, object]:
    n = 3
    per = max(args.base_mb // n, 1)
    t0 = time.perf_counter()
    layers = [_random_layer(per, seed) for seed in range(n)]
    push_base_image(registry, "bench/base", layers, tag="1")
    print(f"base: {n} layers x {per} MB pushed once in {time.perf_counter() - t0:.1f} s")
    base = f"{proxy.host}/bench/base:1"

    ours_times, buildah_times = [], []
    for version in range(1, max(args.rounds, 1) + 1):
        files = _code(args.code_kb, version)
        proxy.reset()
        t0 = time.perf_counter()
        ours = push_code_image(base, f"{proxy.host}/bench/ours", files, cache=LayerCache(tmp / "c"))
        ours_times.append(time.perf_counter() - t0)
        ours_bytes = sum(proxy.uploaded.values())
        proxy.reset()
        # a fresh storage each round: buildah pulls the base, as a new builder or pod does
        target = f"{proxy.host}/bench/buildah:{version}"
        buildah_times.append(_buildah(tmp, base, target, files, f"storage-{version}"))
        buildah_bytes = sum(proxy.uploaded.values())
        print(
            f"round {version}: ours {ours_times[-1]:.3f} s ({ours_bytes} bytes), "
            f"buildah {buildah_times[-1]:.2f} s ({buildah_bytes} bytes)"
        )
    ours_s, buildah_s = statistics.median(ours_times), statistics.median(buildah_times)
    # and buildah with the base already in its storage (a builder that kept it): no goal
    warm_files = _code(args.code_kb, 0)
    warm_s = _buildah(tmp, base, f"{proxy.host}/bench/buildah:warm", warm_files, "storage-1")
    print(f"buildah with the base in its storage: {warm_s:.2f} s")
    cache = LayerCache(tmp / "c")
    layer = cache.get(ours.layer_digest)
    assert layer is not None
    import httpx

    m = httpx.get(
        f"http://{registry}/v2/bench/ours/manifests/{ours.digest}",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    floor = len(layer) + m.json()["config"]["size"] + len(m.content)
    print(f"ours, last round: {ours_bytes} bytes uploaded (floor {floor}); {ours.message()}")

    proxy.reset()
    t0 = time.perf_counter()
    again = push_code_image(base, f"{proxy.host}/bench/ours", files, cache=LayerCache(tmp / "c"))
    again_s = time.perf_counter() - t0
    again_blob = proxy.uploaded["blob"]
    print(f"ours, unchanged: {again_s:.3f} s, {again_blob} blob bytes; {again.message()}")
    return {
        "base_mb": n * per,
        "rounds": len(ours_times),
        "ours_s": round(ours_s, 4),
        "buildah_s": round(buildah_s, 3),
        "speedup_vs_buildah": round(buildah_s / ours_s, 1),
        "speedup_vs_buildah_goal": ">=20",
        "buildah_warm_s": round(warm_s, 3),
        "speedup_vs_buildah_warm": round(warm_s / ours_s, 1),
        "ours_bytes": ours_bytes,
        "buildah_bytes": buildah_bytes,
        "floor_bytes": floor,
        "bytes_vs_floor": round(ours_bytes / floor, 4),
        "bytes_vs_floor_goal": "<=1.05",
        "unchanged_blob_bytes": again_blob,
        "unchanged_blob_bytes_goal": "==0",
        "unchanged_s": round(again_s, 4),
    }


if __name__ == "__main__":
    main()
