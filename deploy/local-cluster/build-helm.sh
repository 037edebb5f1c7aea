#!/usr/bin/env bash
# Builds the helm client (Helm 3, the version pinned in versions.env) from the
# Go module proxy into the same cache as build.sh's binaries, keyed by version.
# Prints the binary's path on stdout. The tests that run helm call it too
# (tests/support/tools.py), so a bare pytest run builds it when it is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
. "$here/versions.env"
cache=${TENANT_GATEWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tenant-gateway}
bin="$cache/bin/helm-$HELM_VERSION"
if [ -x "$bin/helm" ]; then echo "$bin/helm"; exit 0; fi

command -v go >/dev/null || { echo "build-helm.sh: Go toolchain not found; it is needed once per machine to build helm" >&2; exit 1; }
mkdir -p "$bin"
export GOTOOLCHAIN=local CGO_ENABLED=0
export GOMAXPROCS=${GOMAXPROCS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build-helm.sh: building helm $HELM_VERSION (first run on this machine only)" >&2
# `go install pkg@version` builds in module mode with the release's own go.mod;
# the version is stamped as helm's release process does (`helm version`).
GOBIN="$work" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
mv "$work/helm" "$bin/helm"
echo "$bin/helm"
