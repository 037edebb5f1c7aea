#!/usr/bin/env bash
# Builds what makes Services real in the local cluster: kube-proxy (same
# module and version as kube-apiserver, see build.sh) and CoreDNS (the cluster
# DNS), from the Go module proxy for the versions pinned in versions.env, into
# the same per-machine cache, keyed by version. Prints the bin directory.
# The node (devstack/node.py) calls it when a binary is missing; `make test`
# runs it in the background while the pure and component rings run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${TENANT_GATEWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tenant-gateway}
bin="$cache/bin/services-kube-$KUBERNETES_VERSION-coredns-$COREDNS_VERSION"
if [ -x "$bin/kube-proxy" ] && [ -x "$bin/coredns" ]; then echo "$bin"; exit 0; fi

command -v go >/dev/null || { echo "build-services.sh: Go toolchain not found; it is needed once per machine to build kube-proxy and CoreDNS" >&2; exit 1; }
mkdir -p "$bin"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
export GOMAXPROCS=${GOMAXPROCS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log() { echo "build-services.sh: $*" >&2; }
# shellcheck source=kube-module.sh
. "$here/kube-module.sh"

if [ ! -x "$bin/kube-proxy" ]; then
  mkdir -p "$work/kube" && cd "$work/kube"
  write_kube_wrapper_module "$KUBERNETES_VERSION" "k8s.io/kubernetes/cmd/kube-proxy"
  log "building kube-proxy $KUBERNETES_VERSION (first run on this machine only)"
  go build -trimpath -tags selinux,notest -ldflags "$(kube_version_ldflags "$KUBERNETES_VERSION")" \
    -o "$bin/kube-proxy.tmp" k8s.io/kubernetes/cmd/kube-proxy >&2
  mv "$bin/kube-proxy.tmp" "$bin/kube-proxy"
fi

if [ ! -x "$bin/coredns" ]; then
  # `go install pkg@version` builds with CoreDNS's own go.mod (no replace
  # directives; the plugin list, with `kubernetes`, is generated and committed).
  log "building CoreDNS $COREDNS_VERSION (first run on this machine only)"
  GOFLAGS= GOBIN="$work" go install -trimpath \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
    "github.com/coredns/coredns@$COREDNS_VERSION" >&2
  mv "$work/coredns" "$bin/coredns"
fi
echo "$bin"
