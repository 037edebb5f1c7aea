#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl and etcd from the Go module proxy for the versions pinned in versions.env, into a cache outside
# the clone keyed by version. Prints the bin directory on stdout.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod points ~31 staging
# modules at ./staging. A wrapper module requires the release and replaces each
# staging module with its published tag (v1.X.Y <-> v0.X.Y), derived from the
# release's own go.mod so the list never needs typing.
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

build_kube() {
  local minor=${KUBERNETES_VERSION#v1.}   # 34.4
  local staging_version="v0.$minor"
  mkdir -p "$work/kube"
  cd "$work/kube"
  local upstream_mod
  upstream_mod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  local go_line godebug_line
  go_line=$(grep -m1 '^go ' "$upstream_mod")
  godebug_line=$(grep -m1 '^godebug ' "$upstream_mod" || true)
  {
    echo "module tenant-gateway.io/local-cluster/kube"
    echo
    echo "$go_line"
    [ -n "$godebug_line" ] && echo "$godebug_line"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$upstream_mod" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > go.mod
  cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  log "resolving Kubernetes $KUBERNETES_VERSION modules"
  go mod tidy -e >&2 2>&1 | tail -5 >&2 || true
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
  done
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
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
