#!/usr/bin/env bash
# `make test`: make sure PostgreSQL and Redis answer (starting Debian's servers when nothing
# does), then run ruff, mypy, import-linter and pytest. Called by .ci/run.
# Servers it starts listen on free ports and keep their data in a folder of this run, and are
# stopped when it ends, so two runs on one machine never share or stop each other's.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
mkdir -p "${PLINTH_TEST_RUN_DIR:-$PWD/data/test-services}"
RUN_DIR=$(mktemp -d "${PLINTH_TEST_RUN_DIR:-$PWD/data/test-services}/run.XXXXXX")
STARTED_PG=""
STARTED_REDIS=""
cleanup() {
  if [ -n "$STARTED_PG" ]; then
    runuser -u postgres -- "$STARTED_PG/pg_ctl" -D "$RUN_DIR/pg" -m fast -w stop >/dev/null || true
  fi
  if [ -n "$STARTED_REDIS" ]; then kill "$(cat "$RUN_DIR/redis.pid")" 2>/dev/null || true; fi
  rm -rf "$RUN_DIR"
}
trap cleanup EXIT
free_port() {
  "$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/plinth}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export PLINTH_ENV=test
export HF_HUB_OFFLINE=1

db_answers() { "$BIN/python" - "$1" <<'PY'
import sys, psycopg
from urllib.parse import urlparse, urlunparse
u = urlparse(sys.argv[1])
try:
    psycopg.connect(urlunparse(u._replace(path="/postgres")), connect_timeout=3).close()
except Exception:
    sys.exit(1)
PY
}
redis_answers() { "$BIN/python" -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_timeout=2).ping()" "$1" 2>/dev/null; }

if ! db_answers "$DATABASE_URL"; then
  echo "[test] PostgreSQL does not answer at DATABASE_URL; starting Debian's PostgreSQL"
  # Some machine kinds carry only the psql client: install the server (it brings the postgres user).
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    echo "[test] installing Debian's postgresql"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  fi
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  PGDIR="$RUN_DIR/pg"
  PGPORT=$(free_port)
  mkdir -p "$PGDIR" && chown postgres "$PGDIR" "$RUN_DIR"
  runuser -u postgres -- "$PGBIN/initdb" -D "$PGDIR" -A trust -U postgres --no-sync >/dev/null
  STARTED_PG=$PGBIN
  runuser -u postgres -- "$PGBIN/pg_ctl" -D "$PGDIR" -l "$PGDIR/log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $PGDIR -c fsync=off" start >/dev/null || true
  export DATABASE_URL=postgres://postgres@127.0.0.1:$PGPORT/plinth
  db_answers "$DATABASE_URL" || { echo "[test] could not start PostgreSQL"; exit 1; }
fi

if ! redis_answers "$REDIS_URL"; then
  echo "[test] Redis does not answer at REDIS_URL; starting redis-server"
  if ! command -v redis-server >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  fi
  REDISPORT=$(free_port)
  STARTED_REDIS=1
  redis-server --port "$REDISPORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
    --dir "$RUN_DIR" --logfile "$RUN_DIR/redis.log" --pidfile "$RUN_DIR/redis.pid"
  export REDIS_URL=redis://127.0.0.1:$REDISPORT/0
  for _ in $(seq 50); do redis_answers "$REDIS_URL" && break; sleep 0.1; done
  redis_answers "$REDIS_URL" || { echo "[test] could not start Redis"; exit 1; }
fi

# The browser tests drive Debian's Chromium (Playwright cannot download one here).
if [ -z "${PLINTH_SKIP_BROWSER_INSTALL:-}" ] && [ ! -x /usr/bin/chromium ]; then
  echo "[test] installing Debian's chromium for the browser tests"
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

# Benchmarks run the real NVIDIA AIPerf from Plinth's tools environment, which Plinth makes on
# first use (~1.2 GB, a couple of minutes); made here, beside the linters, so no test skips or
# pays for it.
echo "[test] tools environment (in the background)"
"$BIN/python" -m deployments.drivers.local.tools_env >"$RUN_DIR/tools-env.log" 2>&1 &
TOOLS_PID=$!
tools_ready() {
  wait "$TOOLS_PID" || { cat "$RUN_DIR/tools-env.log"; echo "[test] tools environment failed"; exit 1; }
}
# The real Kubernetes control plane of tests/kube_real, built from the Go modules pinned in
# tools/kube once per machine (the first build is long: see the README), reused after that.
echo "[test] Kubernetes binaries (in the background)"
scripts/kube_binaries.sh >"$RUN_DIR/kube-binaries.log" 2>&1 &
KUBE_PID=$!
kube_ready() {
  wait "$KUBE_PID" || { cat "$RUN_DIR/kube-binaries.log"; echo "[test] Kubernetes binaries failed"; exit 1; }
  grep '^\[kube\] built' "$RUN_DIR/kube-binaries.log" || true
}

# The quantization tool's own virtualenv (llmcompressor and torch, pinned in
# tools/quantize/requirements.txt), built once per machine (~6 GB, a few minutes), reused after.
echo "[test] quantization tool environment (in the background)"
scripts/quantize_env.sh >"$RUN_DIR/quantize-env.log" 2>&1 &
QUANTIZE_PID=$!
quantize_ready() {
  wait "$QUANTIZE_PID" || { cat "$RUN_DIR/quantize-env.log"; echo "[test] quantization env failed"; exit 1; }
}

# The real OpenID Connect provider the single sign-on tests start (node-oidc-provider, pinned in
# tools/oidc), installed once per machine with npm; a few seconds, so not in the background.
echo "[test] OIDC provider"
scripts/oidc_provider.sh >"$RUN_DIR/oidc-provider.log" 2>&1 ||
  { cat "$RUN_DIR/oidc-provider.log"; echo "[test] OIDC provider install failed"; exit 1; }

echo "[test] ruff";          "$BIN/ruff" check .
"$BIN/ruff" format --check .
echo "[test] mypy";          "$BIN/mypy"
echo "[test] import-linter"; PYTHONPATH=sdk "$BIN/lint-imports"

if [ "$#" -gt 0 ]; then  # a chosen subset: one run, as asked
  tools_ready
  kube_ready
  quantize_ready
  echo "[test] pytest"
  exec "$BIN/pytest" "$@"
fi

# The whole suite runs as three pytest processes side by side, each with its own test database
# and Redis database: the unit-heavy directories (CPU-bound), tests/kube_real (it mostly waits on
# its control plane's controllers) and the end-to-end ones, which mostly wait on the engines,
# workers, gateways and browsers they start. On 2 cores the waiting sides cost little CPU (a
# tests/kube_real run used 215 s of CPU in 946 s), so running them beside the CPU-bound one cuts
# the wall time. Every test directory not named in UNIT or KUBE runs in the end-to-end side, so
# none can be left out. UNIT also runs the Django-client sweeps (sweep, console, charts) and
# KUBE some end-to-end directories (experiments, sdk, api), so that the three sides take about
# as long; move a directory when one side grows past the others. Change notifications are per
# Redis database (controlplane.redis_clients.changes_channel), so the sides' gateways never hear
# each other.
UNIT=(tests/controlplane tests/runtime tests/drivers tests/test_conventions.py tests/test_layout.py
  tests/sweep tests/console tests/charts)
KUBE=(tests/kube_real tests/experiments tests/sdk tests/api)
E2E=()
for entry in tests/*/ tests/test_*.py; do
  entry=${entry%/}
  case " ${UNIT[*]} ${KUBE[*]} " in *" $entry "*) continue ;; esac
  case "${entry##*/}" in __pycache__ | fixtures) continue ;; esac  # fixtures/: no tests of its own
  E2E+=("$entry")
done
redis_db() {  # REDIS_URL with its database number moved on by $1
  "$BIN/python" - "$REDIS_URL" "$1" <<'PY'
import sys
from urllib.parse import urlparse, urlunparse
u = urlparse(sys.argv[1])
db = int(u.path.strip("/") or 0)
print(urlunparse(u._replace(path=f"/{(db + int(sys.argv[2])) % 16}")))
PY
}
TEST_DB="${PLINTH_TEST_DB_NAME:-test_plinth}"
side() {  # one side's pytest: its name, test database, Redis URL, then the paths it runs
  local name=$1 db=$2 redis=$3 start=$SECONDS rc=0
  shift 3
  PLINTH_TEST_DB_NAME=$db REDIS_URL=$redis "$BIN/pytest" "$@" || rc=$?
  echo "[test] $name side took $((SECONDS - start)) s"
  return "$rc"
}
tools_ready
quantize_ready
echo "[test] pytest: ${KUBE[*]} (here), ${UNIT[*]} and ${E2E[*]} (beside it; their output follows)"
side end-to-end "${TEST_DB}_e2e" "$(redis_db 1)" "${E2E[@]}" >"$RUN_DIR/e2e.log" 2>&1 &
E2E_PID=$!
side unit "$TEST_DB" "$REDIS_URL" "${UNIT[@]}" >"$RUN_DIR/unit.log" 2>&1 &
UNIT_PID=$!
# tests/kube_real starts once the Kubernetes binaries are built: on a fresh machine the build
# runs beside the other two sides instead of before them.
kube_ready
KUBE_RC=0
side kube_real "${TEST_DB}_kube" "$(redis_db 2)" "${KUBE[@]}" || KUBE_RC=$?
UNIT_RC=0
wait "$UNIT_PID" || UNIT_RC=$?
echo "[test] ---- unit directories ----"
cat "$RUN_DIR/unit.log"
E2E_RC=0
wait "$E2E_PID" || E2E_RC=$?
echo "[test] ---- end-to-end directories ----"
cat "$RUN_DIR/e2e.log"
echo "[test] pytest exit codes: kube_real $KUBE_RC, unit $UNIT_RC, end-to-end $E2E_RC"
[ "$KUBE_RC" -eq 0 ] && [ "$UNIT_RC" -eq 0 ] && [ "$E2E_RC" -eq 0 ]
