#!/usr/bin/env bash
# Build (once per machine) the quantization tool's own virtualenv: llmcompressor and torch,
# pinned in tools/quantize/requirements.txt, never in the main virtualenv (torch alone is ~6 GB).
# Prints the venv's python on its last line. `--path`: print it, or exit 3 when not built.
#
# The venv lives in ${PLINTH_QUANTIZE_CACHE:-~/.cache/plinth/quantize}/<key>, where <key> hashes
# the requirements, this script's build steps and the base Python's version: a pin change
# builds a new one, anything else reuses. A venv is trusted only once its .complete marker is
# written at the end of the build (a killed build is removed and redone), and the build runs
# under a lock so two runs never build it twice. It runs under `nice`; scripts/test.sh starts it in the
# background beside the linters. The job runner itself (tools/quantize/plinth_quantize) is not
# installed into the venv: callers put tools/quantize on PYTHONPATH, so editing it never
# rebuilds anything.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUIREMENTS=$PWD/tools/quantize/requirements.txt
BASE_PYTHON=${PLINTH_QUANTIZE_BASE_PYTHON:-python3}
BUILD_VERSION=1  # bump when the way of building changes without a requirements change
ROOT=${PLINTH_QUANTIZE_CACHE:-$HOME/.cache/plinth/quantize}
mkdir -p "$ROOT"

KEY=$({ cat "$REQUIREMENTS"; "$BASE_PYTHON" -c 'import sys; print(sys.version)'; echo "$BUILD_VERSION"; } \
  | sha256sum | cut -c1-16)
DEST=$ROOT/$KEY

if [ "${1:-}" = --path ]; then
  [ -e "$DEST/.complete" ] || { echo "not built: $DEST" >&2; exit 3; }
  echo "$DEST/bin/python"
  exit 0
fi

if [ ! -e "$DEST/.complete" ]; then
  exec 9>"$ROOT/$KEY.lock"
  flock 9  # another run building it: wait, then reuse its result
  if [ ! -e "$DEST/.complete" ]; then
    started=$(date +%s)
    echo "[quantize] building the tool's venv ($(date -u +%H:%M:%S)) into $DEST" >&2
    # Built in place under its final name (a venv records its own path in its scripts), marked
    # complete only at the end; a half-made one from a killed run is removed first.
    rm -rf "$DEST"
    trap 'rm -rf "$DEST"' EXIT
    "$BASE_PYTHON" -m venv "$DEST"
    nice -n 19 "$DEST/bin/python" -m pip install --quiet --no-input --disable-pip-version-check \
      -r "$REQUIREMENTS" >&2
    touch "$DEST/.complete"
    trap - EXIT
    echo "[quantize] built in $(($(date +%s) - started)) s, $(du -sh "$DEST" | cut -f1)" >&2
  fi
  exec 9>&-
fi
echo "$DEST/bin/python"
