# Sourced by build.sh and build-services.sh: the wrapper module every
# Kubernetes binary here is built from.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod points ~31 staging
# modules at ./staging. A wrapper module requires the release and replaces each
# staging module with its published tag (v1.X.Y <-> v0.X.Y), derived from the
# release's own go.mod so the list never needs typing.

# write_kube_wrapper_module VERSION PACKAGE...: go.mod and tools.go in the
# current directory, tidied.
write_kube_wrapper_module() {
  local version=$1; shift
  local minor=${version#v1.}   # 34.4
  local staging_version="v0.$minor"
  local upstream_mod
  upstream_mod=$(go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  local go_line godebug_line
  go_line=$(grep -m1 '^go ' "$upstream_mod")
  godebug_line=$(grep -m1 '^godebug ' "$upstream_mod" || true)
  {
    echo "module tenant-gateway.io/local-cluster/kube"
    echo
    echo "$go_line"
    [ -n "$godebug_line" ] && echo "$godebug_line"
    echo
    echo "require k8s.io/kubernetes $version"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "$upstream_mod" | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } > go.mod
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    local pkg
    for pkg in "$@"; do echo "	_ \"$pkg\""; done
    echo ")"
  } > tools.go
  echo "kube-module.sh: resolving Kubernetes $version modules" >&2
  go mod tidy -e >&2 2>&1 | tail -5 >&2 || true
}

# kube_version_ldflags VERSION: what `kubectl version` and the API server's
# /version report, as the release process stamps it.
kube_version_ldflags() {
  local minor=${1#v1.}
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$1 -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*} -X $pkg.gitTreeState=clean"
  done
  echo "$ldflags"
}
