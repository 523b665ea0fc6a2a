#!/usr/bin/env bash
# The real node's base images, made once per machine without Docker, each an OCI image
# layout (oci-layout, index.json, blobs/) in a cache keyed by node.env and this script:
#   debian-python  Debian (debootstrap --variant=minbase) with python3 as `python`
#   pause          the pod sandbox's image (pause/main.go, static): the node pulls nothing public
# The test harness pushes a layout's blobs and manifest into the test registry through the
# project's own registry client (tests/cluster/node_images.py). Debian's mirror is the one this
# machine's apt already uses. Prints the cache folder on its last line; one build at a time
# (a lock beside the folder). Usage: images.sh [--print-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=node.env
source "$here/node.env"
key=$( (cat "$here/node.env" "$here/images.sh" "$here/pause/main.go"; uname -m) | sha256sum | cut -c1-16)
out="${KTRAIN_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-ktrain/cluster}/images-$key"
if [ "${1:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
if [ "$(id -u)" != 0 ]; then  # debootstrap and the real node need root: their tests skip
  echo "[images build] skipped: it needs root" >&2; exit 0
fi
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
if ! flock -n 9; then
  echo "[images build] waiting for another build of $out (it holds $out.lock)" >&2
  flock 9
fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
start=$SECONDS
step() { echo "[images build $((SECONDS - start))s] $*" >&2; }

mirror() {  # the Debian mirror of this machine's apt sources (deb822 or one-line form)
  local m
  m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' |
      grep -v -- '-security' | head -1 || true)
  [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | head -1 || true)
  [ -n "$m" ] || { echo "no Debian mirror in /etc/apt sources" >&2; exit 1; }
  echo "$m"
}

blob() {  # FILE -> its digest's hex; moved into the layout's blobs
  local h; h=$(sha256sum "$1" | cut -c1-64); mv "$1" "$tmp/$2/blobs/sha256/$h"; echo "$h"
}

# layout NAME ROOTFS ENV_JSON CMD_JSON: one gzip'd layer of ROOTFS, a config and a manifest
layout() {
  local name=$1 root=$2 env=$3 cmd=$4 dir="$tmp/$1"
  rm -rf "$dir"; mkdir -p "$dir/blobs/sha256"
  tar --sort=name --numeric-owner --xattrs --mtime=@0 -C "$root" -cf "$dir/layer.tar" .
  local diff; diff=$(sha256sum "$dir/layer.tar" | cut -c1-64)
  gzip -n -1 "$dir/layer.tar"
  local size; size=$(stat -c %s "$dir/layer.tar.gz")
  local layer; layer=$(blob "$dir/layer.tar.gz" "$name")
  printf '{"architecture":"amd64","config":{"Cmd":%s,"Env":%s},"os":"linux","rootfs":{"diff_ids":["sha256:%s"],"type":"layers"}}' \
    "$cmd" "$env" "$diff" >"$dir/config.json"
  local csize; csize=$(stat -c %s "$dir/config.json")
  local config; config=$(blob "$dir/config.json" "$name")
  printf '{"config":{"digest":"sha256:%s","mediaType":"application/vnd.oci.image.config.v1+json","size":%s},"layers":[{"digest":"sha256:%s","mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":%s}],"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2}' \
    "$config" "$csize" "$layer" "$size" >"$dir/manifest.json"
  local msize; msize=$(stat -c %s "$dir/manifest.json")
  local manifest; manifest=$(blob "$dir/manifest.json" "$name")
  echo '{"imageLayoutVersion":"1.0.0"}' >"$dir/oci-layout"
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s}]}' \
    "$manifest" "$msize" >"$dir/index.json"
}

tmp="$out.partial"
mkdir -p "$tmp"
root="$tmp/rootfs-debian-python"
if [ ! -f "$tmp/debian-python/index.json" ]; then
  step "debian-python: debootstrap $DEBIAN_SUITE (minbase + python3), about a minute"
  rm -rf "$root"
  debootstrap --variant=minbase --include=python3,python-is-python3 \
    "$DEBIAN_SUITE" "$root" "$(mirror)" >"$tmp/debootstrap.log" 2>&1 ||
    { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/dev/*
  # the one command the Training Operator's PyTorchJob init container (its default image
  # alpine:3.10, pushed here as this image) runs that Debian's minbase lacks: nslookup NAME,
  # answered by glibc's resolver (search domains and all), as a pod resolves the master
  printf '#!/bin/sh\nexec python3 -S -c "import socket, sys; print(sys.argv[1], socket.gethostbyname(sys.argv[1]))" "$1"\n' \
    >"$root/usr/local/bin/nslookup"
  chmod 755 "$root/usr/local/bin/nslookup"
  step "debian-python: the layer ($(du -sm "$root" | cut -f1) MB of files)"
  layout debian-python "$root" \
    '["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8"]' \
    '["python"]'
  rm -rf "$root"
fi
if [ ! -f "$tmp/pause/index.json" ]; then
  step "pause: the pod sandbox's image"
  rm -rf "$tmp/rootfs-pause"; mkdir -p "$tmp/rootfs-pause"
  (cd "$here/pause" && GOTOOLCHAIN=local CGO_ENABLED=0 GO111MODULE=off \
    go build -trimpath -ldflags "-s -w" -o "$tmp/rootfs-pause/pause" main.go)
  layout pause "$tmp/rootfs-pause" '["PATH=/"]' '["/pause"]'
  rm -rf "$tmp/rootfs-pause"
fi
touch "$tmp/.complete"
rm -rf "$out"; mv "$tmp" "$out"
step "done: $out"
echo "$out"
