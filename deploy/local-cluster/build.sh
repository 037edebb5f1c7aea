#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl and etcd from the Go module proxy for the versions pinned in versions.env, into a cache outside
# the clone keyed by version. Prints the bin directory on stdout. The Kubernetes
# binaries come from a wrapper module (kube-module.sh says why); kube-proxy and
# CoreDNS are built by build-services.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${TENANT_GATEWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tenant-gateway}
bin="$cache/bin/kube-$KUBERNETES_VERSION-etcd-$ETCD_VERSION"
wanted=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd)

have_all() { for b in "${wanted[@]}"; do [ -x "$bin/$b" ] || return 1; done; }
if have_all; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "build.sh: Go toolchain not found; it is needed once per machine to build the local control plane" >&2; exit 1; }
mkdir -p "$bin"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
# Two cores: a parallel link of three Kubernetes binaries needs ~3 GB each.
export GOMAXPROCS=${GOMAXPROCS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

log() { echo "build.sh: $*" >&2; }
# shellcheck source=kube-module.sh
. "$here/kube-module.sh"

build_kube() {
  mkdir -p "$work/kube"
  cd "$work/kube"
  local commands=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
  write_kube_wrapper_module "$KUBERNETES_VERSION" "${commands[@]/#/k8s.io/kubernetes/cmd/}"
  local ldflags
  ldflags=$(kube_version_ldflags "$KUBERNETES_VERSION")
  for cmd in "${commands[@]}"; do
    [ -x "$bin/$cmd" ] && continue
    log "building $cmd $KUBERNETES_VERSION (first run on this machine only)"
    go build -trimpath -tags selinux,notest -ldflags "$ldflags" -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >&2
    mv "$bin/$cmd.tmp" "$bin/$cmd"
  done
}

build_etcd() {
  [ -x "$bin/etcd" ] && return 0
  mkdir -p "$work/etcd"
  cd "$work/etcd"
  cat > go.mod <<GOMOD
module tenant-gateway.io/local-cluster/etcd

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
GO
  log "building etcd $ETCD_VERSION (first run on this machine only)"
  go mod tidy -e >&2 2>&1 | tail -5 >&2 || true
  go build -trimpath -ldflags "-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
  mv "$bin/etcd.tmp" "$bin/etcd"
}

build_etcd
build_kube
have_all || { log "build finished but binaries are missing in $bin"; exit 1; }
echo "$bin"
