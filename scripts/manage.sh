#!/usr/bin/env bash
# Run a Django management command against the servers `make run` uses (embedded or configured):
#   bash scripts/manage.sh plinth_create_key --org Default --name cli --kind management --role admin
set -euo pipefail
cd "$(dirname "$0")/.."
for file in data/secrets.env data/run.env; do
  if [ -f "$file" ]; then
    while IFS= read -r line; do
      name=${line%%=*}
      # Split by hand: `read` with IFS='=' would drop a base64 key's trailing '='.
      [ -n "$name" ] && [ -z "${!name:-}" ] && export "$name=${line#*=}"
    done < "$file"
  fi
done
exec .venv/bin/python manage.py "$@"
