#!/usr/bin/env bash
# Builds the test cluster's real components from source through the Go module proxy, once per
# machine, into a cache keyed by their versions: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, the Kubeflow Training Operator v1, the Kubeflow Trainer v2 controller
# JobSet and Kueue, plus the CRDs, webhooks and runtimes from their own modules (and Multus's
# NetworkAttachmentDefinition CRD from its client module); the KubeRay operator and its CRDs.
# Prints the cache folder on its last line; two builds on one machine run one after the other
# (a lock beside the cache folder). Usage: build.sh [--print-dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
key=$( (cat "$here/versions.env" "$here"/k8s/go.mod "$here"/k8s/go.sum "$here"/etcd/go.mod \
        "$here"/etcd/go.sum "$here"/etcd/main.go "$here"/jobset/go.mod "$here"/jobset/go.sum \
        "$here"/kueue/go.mod "$here"/kueue/go.sum; \
        cat "$here"/kuberay/go.mod "$here"/kuberay/go.sum "$here"/kuberay/tools.go; \
        go env GOVERSION GOARCH) | sha256sum | cut -c1-16)
out="${KTRAIN_CLUSTER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jupyter-ktrain/cluster}/$key"
if [ "${1:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi

# one build at a time per cache folder: a second build.sh (a test starting the cluster while
# `make cluster` builds) waits here for the first, instead of writing the same .partial folder;
# the lock is the kernel's (flock), so a build that is killed lets go of it
mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
if ! flock -n 9; then
  echo "[cluster build] waiting for another build of $out (it holds $out.lock)" >&2
  flock 9
fi
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi  # the one we waited for built it

export GOTOOLCHAIN=local GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0
tmp="$out.partial"  # kept between attempts: a step whose binary is there is not redone
mkdir -p "$tmp/bin" "$tmp/manifests"
start=$SECONDS
step() { echo "[cluster build $((SECONDS - start))s] $*" >&2; }

ver="k8s.io/component-base/version"
cver="k8s.io/client-go/pkg/version"
minor=$(echo "$KUBE_VERSION" | cut -d. -f2)
vflags=""
for p in "$ver" "$cver"; do
  vflags="$vflags -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  vflags="$vflags -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
have() { for b in "$@"; do [ -x "$tmp/bin/$b" ] || return 1; done; }
step "Kubernetes $KUBE_VERSION: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (slowest part)"
have kube-apiserver kube-controller-manager kube-scheduler kubectl || (cd "$here/k8s" && go build -ldflags "-s -w $vflags" -o "$tmp/bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
step "etcd $ETCD_VERSION"
have etcd || (cd "$here/etcd" && go build -ldflags "-s -w" -o "$tmp/bin/etcd" .)
step "Kubeflow Training Operator $TRAINING_OPERATOR_VERSION"
have training-operator.v1 || GOBIN="$tmp/bin" go install -ldflags "-s -w" \
  "github.com/kubeflow/training-operator/cmd/training-operator.v1@$TRAINING_OPERATOR_VERSION"
step "Kubeflow Trainer $TRAINER_VERSION"
have trainer-controller-manager || GOBIN="$tmp/bin" go install -ldflags "-s -w" \
  "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager@$TRAINER_VERSION"
step "JobSet $JOBSET_VERSION"
have jobset || (cd "$here/jobset" && go build -ldflags "-s -w" -o "$tmp/bin/jobset" sigs.k8s.io/jobset)
step "KubeRay operator $KUBERAY_VERSION"
have kuberay-operator || (cd "$here/kuberay" && go build -ldflags "-s -w" -o "$tmp/bin/kuberay-operator" \
  github.com/ray-project/kuberay/ray-operator)

step "Kueue $KUEUE_VERSION"
have kueue || (cd "$here/kueue" && go build -ldflags "-s -w" -o "$tmp/bin/kueue" sigs.k8s.io/kueue/cmd/kueue)

step "manifests (CRDs, webhooks, runtimes) from the modules"
mod="$(go env GOMODCACHE)"
nad="github.com/k8snetworkplumbingwg/network-attachment-definition-client"
(cd "$tmp" && go mod download "$nad@$MULTUS_NAD_VERSION")
rm -rf "$tmp/manifests"/*
cp -r "$mod/github.com/kubeflow/training-operator@$TRAINING_OPERATOR_VERSION/manifests" "$tmp/manifests/training-operator"
cp -r "$mod/github.com/kubeflow/trainer/v2@$TRAINER_VERSION/manifests" "$tmp/manifests/trainer"
cp -r "$mod/sigs.k8s.io/jobset@$JOBSET_VERSION/config" "$tmp/manifests/jobset"
mkdir -p "$tmp/manifests/kueue"
for part in crd webhook visibility; do
  cp -r "$mod/sigs.k8s.io/kueue@$KUEUE_VERSION/config/components/$part" "$tmp/manifests/kueue/"
done
mkdir -p "$tmp/manifests/kuberay"
cp "$mod/github.com/ray-project/kuberay/ray-operator@$KUBERAY_VERSION/config/crd/bases"/*.yaml "$tmp/manifests/kuberay/"
mkdir -p "$tmp/manifests/multus"
cp "$mod/$nad@$MULTUS_NAD_VERSION/artifacts/networks-crd.yaml" "$tmp/manifests/multus/"
chmod -R u+w "$tmp/manifests"
touch "$tmp/.complete"
rm -rf "$out"; mv "$tmp" "$out"
step "done: $out"
echo "$out"
