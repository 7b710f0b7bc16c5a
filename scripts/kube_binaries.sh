#!/usr/bin/env bash
# Build (once per machine) the real Kubernetes control plane the tests in tests/kube_real run:
# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok, from the Go modules
# pinned in tools/kube/*/go.mod. Prints the folder holding the binaries on its last line; kwok's
# stages (kwok-stages.yaml) lie beside it. `--path`: print that folder, or fail when not built.
#
# The binaries land in ${PLINTH_KUBE_CACHE:-~/.cache/plinth/kube}/<key>/bin, where <key> hashes
# the pinned modules and this build's flags: a version bump builds afresh, anything else reuses.
# A build goes into a temporary folder renamed into place when complete (a killed build leaves
# nothing half-made that a later run would trust), under a lock so two runs never build twice.
# The first build is long (the three Kubernetes commands: ~15 CPU-minutes, ~1 GB of modules), so
# it runs under `nice` and scripts/test.sh starts it in the background beside the linters.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=$PWD/tools/kube
K8S_VERSION=v1.37.2
# What `kube-apiserver --version` reports; Kubernetes' own release build sets the same variables
# (hack/lib/version.sh). A fixed build date keeps the binaries reproducible.
VERSION_PKGS=(k8s.io/component-base/version k8s.io/client-go/pkg/version)
K8S_LDFLAGS=""
for pkg in "${VERSION_PKGS[@]}"; do
  K8S_LDFLAGS+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37"
  K8S_LDFLAGS+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
BUILD_FLAGS_VERSION=1  # bump when the way of building changes without a go.mod change

key=$( { cat "$TOOLS"/*/go.mod "$TOOLS"/*/go.sum; echo "$K8S_LDFLAGS $BUILD_FLAGS_VERSION"; } \
  | sha256sum | cut -c1-16)
ROOT=${PLINTH_KUBE_CACHE:-$HOME/.cache/plinth/kube}
DEST=$ROOT/$key
mkdir -p "$ROOT"

if [ "${1:-}" = --path ]; then  # only say where they are: exit 3 when not built
  [ -x "$DEST/bin/kube-apiserver" ] || { echo "not built: $DEST" >&2; exit 3; }
  echo "$DEST/bin"
  exit 0
fi
if [ ! -x "$DEST/bin/kube-apiserver" ]; then
  exec 9>"$ROOT/$key.lock"
  flock 9  # another run building the same key: wait for it, then reuse its result
fi
if [ -x "$DEST/bin/kube-apiserver" ]; then
  echo "$DEST/bin"
  exit 0
fi

TMP=$(mktemp -d "$ROOT/$key.building.XXXXXX")
chmod 755 "$TMP"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/bin"
started=$(date +%s)
build() {  # build <module dir> <go build args...>
  local dir=$1
  shift
  echo "[kube] building $(basename "$dir") ($(date -u +%H:%M:%S))" >&2
  (cd "$dir" && nice -n 19 go build -o "$TMP/bin/" "$@") >&2
}
build "$TOOLS/etcd" go.etcd.io/etcd/server/v3
mv "$TMP/bin/server" "$TMP/bin/etcd"  # go names it after the path element before /v3
build "$TOOLS/kwok" sigs.k8s.io/kwok/cmd/kwok
# kwok itself has no default stages (kwokctl adds them): keep the pinned release's own ones,
# nodes becoming Ready and heartbeating by lease, pods Running/Ready, completed, deleted.
KWOK_SRC=$(cd "$TOOLS/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
  pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
  echo "---"
  cat "$KWOK_SRC/kustomize/stage/$stage.yaml"
done >"$TMP/kwok-stages.yaml"
build "$TOOLS/kubernetes" -ldflags "$K8S_LDFLAGS" k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
echo "[kube] built in $(($(date +%s) - started)) s into $DEST" >&2
mv "$TMP" "$DEST"  # kube-apiserver is built last, so its presence means a complete folder
trap - EXIT
echo "$DEST/bin"
