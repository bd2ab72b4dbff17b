#!/usr/bin/env bash
# Tests the server against its published API, docs/openapi.json, with Schemathesis: every
# operation of the document gets examples, coverage cases, fuzzed and stateful sequences, and
# every check (no 5xx, documented status codes, headers and bodies, invalid input refused,
# valid input accepted). Part of CI (.ci/run).
#
# It validates the document, starts `flashgate serve` on a free local port against a fresh
# database (dropped on exit, with the run's Redis keys), seeds a few vouchers and orders
# (scripts/schemathesis.toml points the generated requests at them), runs Schemathesis and
# exits non-zero on any failure. Settings: SCHEMATHESIS_MAX_EXAMPLES (cases per operation and
# phase, default 100), SCHEMATHESIS_SEED (default 1; a fixed seed makes CI repeatable),
# FLASHGATE_BIN (a server binary to test instead of the debug build, e.g. a release one).
# Anything after the options goes to `schemathesis run`, e.g. `--include-path /health`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[schemathesis] %s\n' "$*" >&2; }

started=$SECONDS
. scripts/lib.sh
VENV=$TOOLS/schemathesis-venv
pinned_venv "$VENV" scripts/schemathesis-tools.txt

log "validating docs/openapi.json"
"$VENV/bin/openapi-spec-validator" docs/openapi.json

./scripts/services.sh

# Databases left by runs that were killed before their cleanup.
if command -v psql >/dev/null 2>&1; then
  psql -h 127.0.0.1 -U postgres -d postgres -Atqc \
    "SELECT datname FROM pg_database WHERE datname LIKE 'fg\_schemathesis\_%'" 2>/dev/null |
    while read -r stale; do
      psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS \"$stale\" WITH (FORCE)" \
        >/dev/null 2>&1 || true
    done || true
fi

bin=${FLASHGATE_BIN:-}
if [ -z "$bin" ]; then
  log "cargo build --bin flashgate"
  cargo build --locked --bin flashgate
  bin="$(target_dir)/debug/flashgate"
fi

# The server's log and any report asked for (`--report har`, ...) stay for a look afterwards.
out=.flashgate/schemathesis
mkdir -p "$out"
work=$(mktemp -d)
db="fg_schemathesis_$$"
prefix="fg-schemathesis-$$:"
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  if command -v psql >/dev/null 2>&1; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" \
      >/dev/null 2>&1 || true
  fi
  if command -v redis-cli >/dev/null 2>&1; then
    redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "$prefix*" 2>/dev/null |
      xargs -r redis-cli -h 127.0.0.1 -p 6379 del >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# PORT=0: the server picks a free port and logs its URL. No background sweep: the run is about
# the HTTP API, and a sweep could release the seeded reservations under it.
log "starting flashgate serve (database $db)"
DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db" REDIS_KEY_PREFIX="$prefix" PORT=0 \
  SWEEP_INTERVAL_SECONDS=0 RUST_LOG=info "$bin" serve >"$out/server.log" 2>&1 &
server_pid=$!

url=
for _ in $(seq 1 120); do
  url=$(grep -o '"url":"http://[^"]*"' "$out/server.log" 2>/dev/null | head -n 1 | cut -d'"' -f4 || true)
  [ -n "$url" ] && curl -fsS "$url/health" >/dev/null 2>&1 && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$out/server.log" >&2
    log "the server exited"
    exit 1
  fi
  url=
  sleep 0.5
done
[ -n "$url" ] || { cat "$out/server.log" >&2; log "the server did not become healthy"; exit 1; }
log "server healthy at $url"

# The data scripts/schemathesis.toml names.
call() { # method path [body] -> expected status
  local method=$1 path=$2 body=${3:-} want=$4 got
  got=$(curl -sS -o "$work/seed.out" -w '%{http_code}' -X "$method" \
    -H 'content-type: application/json' ${body:+--data "$body"} "$url$path")
  if [ "$got" != "$want" ]; then
    log "seeding: $method $path answered $got, expected $want: $(cat "$work/seed.out")"
    exit 1
  fi
}
voucher() { # code, extra fields
  call POST /vouchers "{\"code\":\"$1\",\"discountAmount\":100000,\"minOrderAmount\":1000,\"totalLimit\":1000,$2}" 201
}
reserve() { # code orderId customerId
  call POST "/vouchers/$1/reservations" "{\"customerId\":$3,\"orderId\":\"$2\",\"orderAmount\":500000}" 201
}
voucher SALE100K '"startsAt":"2026-01-01T00:00:00Z","endsAt":"2099-01-01T00:00:00Z"'
voucher FLASH1K '"flashSale":true,"startsAt":"2026-01-01T00:00:00Z","endsAt":"2099-01-01T00:00:00Z"'
voucher ENDED '"startsAt":"2020-01-01T00:00:00Z","endsAt":"2021-01-01T00:00:00Z"'
call POST /vouchers/FLASH1K/warmup '' 200
reserve SALE100K order-1 42
reserve SALE100K order-2 43
call POST /vouchers/SALE100K/reservations/order-2/confirm '' 200
reserve SALE100K order-3 44
call DELETE /vouchers/SALE100K/reservations/order-3 '' 204
reserve FLASH1K order-1 42
log "seeded SALE100K, FLASH1K, ENDED and 4 orders"

# One worker: the server needs the rest of the machine, and with two threads Python 3.11 was
# seen failing a run with "SystemError: AST constructor recursion depth mismatch" (a CPython
# bug when two threads parse source at once; Hypothesis parses its lambdas' source).
status=0
"$VENV/bin/schemathesis" --config-file scripts/schemathesis.toml run docs/openapi.json \
  --url "$url" \
  --max-examples "${SCHEMATHESIS_MAX_EXAMPLES:-100}" \
  --seed "${SCHEMATHESIS_SEED:-1}" \
  --workers 1 \
  --request-timeout 10 \
  --no-color \
  --report-dir "$out/report" \
  "$@" || status=$?

# What the server saw, from its one log line per request: requests by route and status.
python3 - "$out/server.log" <<'EOF'
import collections, json, re, sys

routes = [
    (r"/vouchers/[^/]+/reservations/[^/]+/confirm", "/vouchers/{code}/reservations/{orderId}/confirm"),
    (r"/vouchers/[^/]+/reservations/[^/]+", "/vouchers/{code}/reservations/{orderId}"),
    (r"/vouchers/[^/]+/reservations", "/vouchers/{code}/reservations"),
    (r"/vouchers/[^/]+/validations", "/vouchers/{code}/validations"),
    (r"/vouchers/[^/]+/warmup", "/vouchers/{code}/warmup"),
    (r"/vouchers/[^/]+", "/vouchers/{code}"),
]
seen = collections.defaultdict(collections.Counter)
errors = collections.Counter()
for line in open(sys.argv[1], errors="replace"):
    try:
        entry = json.loads(line)
    except ValueError:
        continue
    if entry.get("level") == "ERROR":
        errors[f"{entry.get('message')}: {entry.get('error', '')}"] += 1
    if entry.get("message") != "request":
        continue
    path = entry.get("path", "")
    for pattern, template in routes:
        if re.fullmatch(pattern, path):
            path = template
            break
    seen[f"{entry.get('method')} {path}"][entry.get("status")] += 1
print("requests the server answered, by route and status:")
for route in sorted(seen, key=lambda r: -sum(seen[r].values()))[:20]:
    statuses = ", ".join(f"{status}: {n}" for status, n in sorted(seen[route].items()))
    print(f"  {sum(seen[route].values()):6}  {route}  ({statuses})")
for message, n in errors.most_common(10):
    print(f"  the server logged {n} x ERROR {message}")
EOF
log "done in $((SECONDS - started)) s: schemathesis exited $status"
exit "$status"
