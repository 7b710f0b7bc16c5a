#!/usr/bin/env bash
# Build (once per machine) the real Kubernetes control plane the tests in tests/kube_real run:
# kube-apiserver, kube-controller-manager, kube-scheduler, etcd and kwok, from the Go modules
# pinned in tools/kube/*/go.mod. Prints the folder holding the binaries on its last line (and
# kwok-stages.yaml, kwok's stages). `--path`: print that folder, or fail when not built.
#
# Each module builds into a folder of its own, ${PLINTH_KUBE_CACHE:-~/.cache/plinth/kube}/
# <module>-<key>, where <key> hashes that module's go.mod/go.sum and its build flags: a version
# bump rebuilds that module only, anything else reuses. The folder the tests use,
# <ROOT>/<hash of all keys>/bin, links to every module's binaries. A build goes into a temporary
# folder renamed into place when complete (a killed build leaves nothing half-made that a later
# run would trust), under a lock so two runs never build the same module twice.
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
BUILD_FLAGS_VERSION=2  # bump when the way of building changes without a go.mod change
ROOT=${PLINTH_KUBE_CACHE:-$HOME/.cache/plinth/kube}
mkdir -p "$ROOT"

module_key() {  # module_key <module> <build flags...>: the hash naming that module's folder
  local module=$1
  shift
  { cat "$TOOLS/$module/go.mod" "$TOOLS/$module/go.sum"; declare -f "build_$module"
    echo "$* $BUILD_FLAGS_VERSION"; } \
    | sha256sum | cut -c1-16
}

# --- what each module builds (one function per module; each fills "$OUT", its folder) -------
build_etcd() {
  go_build etcd go.etcd.io/etcd/server/v3
  mv "$OUT/server" "$OUT/etcd"  # go names it after the path element before /v3
}
build_kwok() {
  go_build kwok sigs.k8s.io/kwok/cmd/kwok
  # kwok itself has no default stages (kwokctl adds them): keep the pinned release's own ones,
  # nodes becoming Ready and heartbeating by lease, pods Running/Ready, completed, deleted.
  local src
  src=$(cd "$TOOLS/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  for stage in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    echo "---"
    cat "$src/kustomize/stage/$stage.yaml"
  done >"$OUT/kwok-stages.yaml"
}
build_kubernetes() {
  go_build kubernetes -ldflags "$K8S_LDFLAGS" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
}
build_lws() {
  # The version its release build stamps (its Makefile's LD_FLAGS), from the pin in go.mod.
  local version src
  version=$(cd "$TOOLS/lws" && go list -m -f '{{.Version}}' sigs.k8s.io/lws)
  go_build lws -ldflags "-X sigs.k8s.io/lws/pkg/version.GitVersion=$version" sigs.k8s.io/lws/cmd
  mv "$OUT/cmd" "$OUT/lws-controller"  # go names it after its package folder
  # The release's own manifests, which tests/kube_real installs as config/default would: both
  # CRDs (its DisaggregatedSet controller watches its kind too), the controller's ClusterRole
  # and the webhook configurations (their clientConfig pointed at the local process there).
  src=$(cd "$TOOLS/lws" && go list -m -f '{{.Dir}}' sigs.k8s.io/lws)/config
  cat "$src/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml" <(echo "---") \
    "$src/crd/bases/disaggregatedset.x-k8s.io_disaggregatedsets.yaml" >"$OUT/lws-crds.yaml"
  cp "$src/rbac/role.yaml" "$OUT/lws-role.yaml"
  cp "$src/webhook/manifests.yaml" "$OUT/lws-webhooks.yaml"
  chmod 644 "$OUT"/lws-*.yaml  # the module cache's files are read-only
}
build_helm() {
  go_build helm helm.sh/helm/v4/cmd/helm
}
MODULES=(etcd kwok kubernetes lws helm)
flags_of() {  # the build flags that change a module's output besides its go.mod
  case $1 in
    kubernetes) echo "$K8S_LDFLAGS" ;;
    *) echo "" ;;
  esac
}

go_build() {  # go_build <module> <go build args...>: into "$OUT"
  local module=$1
  shift
  echo "[kube] building $module ($(date -u +%H:%M:%S))" >&2
  (cd "$TOOLS/$module" && nice -n 19 go build -o "$OUT/" "$@") >&2
}

module_dir() {  # module_dir <module>: its folder, built first when absent
  local module=$1 key dest
  key=$(module_key "$module" "$(flags_of "$module")")
  dest=$ROOT/$module-$key
  if [ ! -e "$dest/.complete" ]; then
    exec 9>"$ROOT/$module-$key.lock"
    flock 9  # another run building the same module: wait for it, then reuse its result
    if [ ! -e "$dest/.complete" ]; then
      local started
      started=$(date +%s)
      OUT=$(mktemp -d "$ROOT/$module-$key.building.XXXXXX")
      chmod 755 "$OUT"
      trap 'rm -rf "$OUT"' EXIT
      "build_$module"
      touch "$OUT/.complete"
      rm -rf "$dest"
      mv "$OUT" "$dest"
      trap - EXIT
      echo "[kube] built $module in $(($(date +%s) - started)) s into $dest" >&2
    fi
    exec 9>&-
  fi
  echo "$dest"
}

keys=""
for module in "${MODULES[@]}"; do
  keys+="$module-$(module_key "$module" "$(flags_of "$module")") "
done
DEST=$ROOT/$(echo "$keys" | sha256sum | cut -c1-16)

if [ "${1:-}" = --path ]; then  # only say where they are: exit 3 when not built
  [ -e "$DEST/.complete" ] || { echo "not built: $DEST" >&2; exit 3; }
  echo "$DEST/bin"
  exit 0
fi
if [ ! -e "$DEST/.complete" ]; then
  TMP=$(mktemp -d "$ROOT/links.XXXXXX")
  chmod 755 "$TMP"
  mkdir "$TMP/bin"
  for module in "${MODULES[@]}"; do
    dir=$(module_dir "$module")
    for file in "$dir"/*; do
      ln -s "$file" "$TMP/bin/$(basename "$file")"
    done
  done
  touch "$TMP/.complete"
  mv -T "$TMP" "$DEST" 2>/dev/null || rm -rf "$TMP"  # a parallel run made it first: keep theirs
fi
echo "$DEST/bin"
