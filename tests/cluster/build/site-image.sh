#!/usr/bin/env bash
# A base image of the real node's, once per machine: images.sh's Debian + Python layer and a
# second layer with one distribution and everything it requires (REQ: `torch`, the version the
# project pins, node.env's TORCH_VERSION, the registry's CUDA build, about 5 GB with its
# libraries; `ray[default]`, Ray with its dashboard, which KubeRay's pods start), copied from
# PYTHON's installed distributions (the project's venv: `make setup` installs exactly those, so
# nothing is downloaded twice) into Debian's /usr/local/lib/python3.11/dist-packages, with their
# console scripts (torchrun, ray) in /usr/local/bin as pip would write them. The layer is left
# uncompressed (gzip of 5 GB costs minutes of CPU; containerd unpacks it as it is). An OCI image
# layout in a cache keyed by node.env, this script, REQ and its installed version; one build at
# a time (a lock).
# Usage: site-image.sh PYTHON REQ [--print-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py=$1
req=$2
dist=${req%%[*}
name=${dist}-image
# shellcheck source=node.env
source "$here/node.env"
have=$("$py" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$dist")
if [ "$dist" = torch ] && [ "${have%%+*}" != "$TORCH_VERSION" ]; then
  echo "$py has torch $have, not $TORCH_VERSION (node.env)" >&2; exit 1
fi
base=$("$here/images.sh")/debian-python
key=$( (cat "$here/node.env" "$here/site-image.sh" "$here/site_files.py"; echo "$req $have $base") |
       sha256sum | cut -c1-16)
out="${KTRAIN_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-ktrain/cluster}/$name-$key"
if [ "${3:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
if [ "$(id -u)" != 0 ]; then  # debootstrap and the real node need root: their tests skip
  echo "[$name] skipped: it needs root" >&2; exit 0
fi
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
if ! flock -n 9; then
  echo "[$name] waiting for another build of $out (it holds $out.lock)" >&2
  flock 9
fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
start=$SECONDS
step() { echo "[$name $((SECONDS - start))s] $*" >&2; }
tmp="$out.partial"
rm -rf "$tmp"; mkdir -p "$tmp/blobs/sha256"
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
step "$req $have and its requirements from $site (one-off, about a minute for torch)"
"$py" "$here/site_files.py" "$req" "$tmp/scripts/usr/local/bin" | sort -u >"$tmp/files"
tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$site" -cf "$tmp/layer.tar" \
  --transform 's,^,usr/local/lib/python3.11/dist-packages/,' -T "$tmp/files"
tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$tmp/scripts" -rf "$tmp/layer.tar" usr
rm -rf "$tmp/scripts"
size=$(stat -c %s "$tmp/layer.tar")
layer=$(sha256sum "$tmp/layer.tar" | cut -c1-64)
mv "$tmp/layer.tar" "$tmp/blobs/sha256/$layer"
step "the layer: $((size >> 20)) MB"
# the base's layer and config, with the torch layer after them
bmanifest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"][7:])' "$base/index.json")
python3 - "$base" "$tmp" "$bmanifest" "$layer" "$size" <<'PY'
import hashlib, json, os, shutil, sys
base, tmp, bman, layer, size = sys.argv[1:]
blobs = os.path.join(base, "blobs", "sha256")
manifest = json.load(open(os.path.join(blobs, bman)))
config = json.load(open(os.path.join(blobs, manifest["config"]["digest"][7:])))
for d in manifest["layers"]:
    shutil.copy(os.path.join(blobs, d["digest"][7:]), os.path.join(tmp, "blobs", "sha256"))
config["rootfs"]["diff_ids"].append("sha256:" + layer)
def put(obj):
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    h = hashlib.sha256(data).hexdigest()
    open(os.path.join(tmp, "blobs", "sha256", h), "wb").write(data)
    return h, len(data)
ch, cs = put(config)
manifest["config"] = {**manifest["config"], "digest": "sha256:" + ch, "size": cs}
manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar",
                           "digest": "sha256:" + layer, "size": int(size)})
mh, ms = put(manifest)
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": manifest["mediaType"],
           "digest": "sha256:" + mh, "size": ms}]}, open(os.path.join(tmp, "index.json"), "w"))
open(os.path.join(tmp, "oci-layout"), "w").write('{"imageLayoutVersion":"1.0.0"}')
PY
rm -f "$tmp/files"
touch "$tmp/.complete"
rm -rf "$out"; mv "$tmp" "$out"
step "done: $out"
echo "$out"
