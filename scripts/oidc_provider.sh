#!/usr/bin/env bash
# Install (once per machine) the real OpenID Connect provider the single sign-on tests start:
# node-oidc-provider and jose at the versions pinned in tools/oidc/package-lock.json, with npm.
# Prints the folder holding node_modules on its last line. `--path`: print it, or fail when not
# installed.
#
# The folder is ${PLINTH_OIDC_CACHE:-~/.cache/plinth/oidc}/<key>, where <key> hashes the
# package files: a version bump installs anew, anything else reuses. An install goes into a
# temporary folder renamed into place when complete, so a killed one leaves nothing half-made.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD/tools/oidc
ROOT=${PLINTH_OIDC_CACHE:-$HOME/.cache/plinth/oidc}
KEY=$(cat "$SRC/package.json" "$SRC/package-lock.json" | sha256sum | cut -c1-16)
DEST=$ROOT/$KEY
if [ "${1:-}" = "--path" ]; then
  [ -d "$DEST/node_modules" ] || { echo "not installed: run scripts/oidc_provider.sh" >&2; exit 1; }
  echo "$DEST"
  exit 0
fi
if [ ! -d "$DEST/node_modules" ]; then
  if ! command -v npm >/dev/null; then
    echo "[oidc] installing Debian's nodejs and npm"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
  fi
  if ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)'; then
    echo "[oidc] node $(node --version) is too old: node-oidc-provider 9 needs node 20 or newer" >&2
    exit 1
  fi
  mkdir -p "$ROOT"
  TMP=$(mktemp -d "$ROOT/.install.XXXXXX")
  trap 'rm -rf "$TMP"' EXIT
  cp "$SRC/package.json" "$SRC/package-lock.json" "$TMP/"
  (cd "$TMP" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
  mv -T "$TMP" "$DEST" 2>/dev/null || [ -d "$DEST/node_modules" ]  # another run got there first
  echo "[oidc] installed node-oidc-provider into $DEST"
fi
echo "$DEST"
