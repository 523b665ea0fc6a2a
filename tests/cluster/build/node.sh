#!/usr/bin/env bash
# Builds the real node's components, once per machine, into a cache of their own keyed by
# their versions (node.env, and versions.env's KUBE_VERSION): the kubelet and kube-proxy from
# the control plane's wrapper module (k8s/), containerd 2.x and its runc shim from the Go
# module proxy, and CoreDNS from its own wrapper module (coredns/). runc and the CNI plugins
# are Debian's (scripts/system-packages). Kept apart from build.sh so that changing the node
# does not rebuild the control plane. Prints the cache folder on its last line; two builds on
# one machine run one after the other (a lock beside the cache folder), as build.sh's do.
# Usage: node.sh [--print-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=node.env
source "$here/node.env"
key=$( (cat "$here/versions.env" "$here/node.env" "$here"/k8s/go.mod "$here"/k8s/go.sum \
        "$here/kubelet.sum" "$here"/coredns/go.mod "$here"/coredns/go.sum "$here"/coredns/main.go; \
        go env GOVERSION GOARCH) | sha256sum | cut -c1-16)
out="${KTRAIN_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-ktrain/cluster}/node-$key"
if [ "${1:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi

mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
if ! flock -n 9; then
  echo "[node build] waiting for another build of $out (it holds $out.lock)" >&2
  flock 9
fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0
tmp="$out.partial"  # kept between attempts: a step whose binary is there is not redone
mkdir -p "$tmp/bin"
start=$SECONDS
step() { echo "[node build $((SECONDS - start))s] $*" >&2; }
have() { for b in "$@"; do [ -x "$tmp/bin/$b" ] || return 1; done; }

step "containerd $CONTAINERD_VERSION and its runc shim (about 3-4 min on 2 cores)"
have containerd containerd-shim-runc-v2 || GOBIN="$tmp/bin" go install -ldflags "-s -w" \
  "github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
  "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION"
step "CoreDNS $COREDNS_VERSION (kubernetes, cache, health, ready, errors, log plugins)"
have coredns || (cd "$here/coredns" && go build -ldflags "-s -w" -o "$tmp/bin/coredns" .)
step "kubelet and kube-proxy $KUBE_VERSION (the control plane's wrapper module)"
ver="k8s.io/component-base/version"
cver="k8s.io/client-go/pkg/version"
minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
vflags=""
for p in "$ver" "$cver"; do
  vflags="$vflags -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  vflags="$vflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
# in a copy of the module: the kubelet's packages need checksums (kubelet.sum) the control
# plane's go.sum lacks, and that go.sum is part of build.sh's cache key, so it stays as it is
mod="$tmp/k8s-module"
mkdir -p "$mod"
cp "$here/k8s/go.mod" "$here/k8s/tools.go" "$mod/"
cat "$here/k8s/go.sum" "$here/kubelet.sum" >"$mod/go.sum"
have kubelet kube-proxy || (cd "$mod" && go build -ldflags "-s -w $vflags" -o "$tmp/bin/" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy)
rm -rf "$mod"
touch "$tmp/.complete"
rm -rf "$out"; mv "$tmp" "$out"
step "done: $out"
echo "$out"
