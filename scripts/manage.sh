#!/usr/bin/env bash
# Run a Django management command against exactly the servers `make run` uses: those it wrote to
# $PLINTH_DATA_DIR/run.env (default data/), whatever DATABASE_URL or REDIS_URL this shell has.
#   bash scripts/manage.sh plinth_create_key --org Default --name cli --kind management --role admin
set -euo pipefail
DATA_DIR=${PLINTH_DATA_DIR:-$(dirname "$0")/../data}
DATA_DIR=$(cd "$DATA_DIR" 2>/dev/null && pwd) || {
  echo "scripts/manage.sh: no data folder at ${PLINTH_DATA_DIR:-data/}; start \`make run\` first" >&2
  exit 1
}
cd "$(dirname "$0")/.."
if [ ! -f "$DATA_DIR/run.env" ]; then
  echo "scripts/manage.sh: $DATA_DIR/run.env is missing: start \`make run\` (with the same" \
    "PLINTH_DATA_DIR) first, so this uses its servers and not some other database" >&2
  exit 1
fi
load() {  # $1: file; $2: "override" to replace what the environment has
  while IFS= read -r line; do
    name=${line%%=*}
    [ -n "$name" ] || continue
    # Split by hand: `read` with IFS='=' would drop a base64 key's trailing '='.
    if [ "${2:-}" = override ] || [ -z "${!name:-}" ]; then export "$name=${line#*=}"; fi
  done < "$1"
}
# Where the servers are: run.env wins (it says what `make run` used, env or embedded).
load "$DATA_DIR/run.env" override
# The keys: like `make run`, the environment's own win over the ones kept for this install.
if [ -f "$DATA_DIR/secrets.env" ]; then load "$DATA_DIR/secrets.env"; fi
export PLINTH_DATA_DIR="$DATA_DIR"
exec .venv/bin/python manage.py "$@"
