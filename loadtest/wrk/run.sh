#!/usr/bin/env bash
# All-winners HTTP runs with wrk, side by side in one run: the `/health/live` ceiling, then
# reserve on a voucher whose limit never runs out (every request a new customer, so every
# request should win), standard and flash. A case is `KIND[:K][@plain]`: K the counter slots
# (absent: the service's own choice, 32 for this limit); `@plain` sends it to a second server
# that writes each reserve on its own (GROUP_COMMIT_MAX=1), as before group commit. Each case
# gets a fresh voucher.
#
#   ./loadtest/wrk/run.sh                 # 10 s per case, 64 connections, 2 wrk threads
#   DURATION=5s CONNECTIONS=32 ./loadtest/wrk/run.sh
#   CASES="ceiling flash:1@plain flash" ./loadtest/wrk/run.sh
#
# It builds and starts its own release servers (ports 3900 and 3901, database fg_bench_http,
# Redis key prefix fg_bench_http:), and stops them at the end. Extra server settings pass
# through the environment (e.g. EVENTS_QUEUE_URL for mode B).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
CASES=${CASES:-"ceiling standard:1@plain standard:1 standard flash:1@plain flash:1 flash"}
PORT=${BENCH_PORT:-3900}
DB=${BENCH_DATABASE:-fg_bench_http}
BASE=http://127.0.0.1:$PORT

command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }
./scripts/services.sh >/dev/null
cargo build --release --locked --bin flashgate >/dev/null
psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null

serve() { # PORT [SETTING=VALUE...]
  env DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB REDIS_KEY_PREFIX=$DB: PORT=$1 \
    SWEEP_INTERVAL_SECONDS=0 RUST_LOG=warn "${@:2}" ./target/release/flashgate serve \
    >>/tmp/$DB.log 2>&1 &
  servers="${servers:-} $!"
  for _ in $(seq 100); do curl -sf http://127.0.0.1:$1/health >/dev/null && return; sleep 0.2; done
}
trap 'kill $servers 2>/dev/null; wait $servers 2>/dev/null' EXIT
serve "$PORT"
serve $((PORT + 1)) GROUP_COMMIT_MAX=1

printf '| case | req/s | p50 ms | p99 ms | not 201 |\n|---|---|---|---|---|\n'
run=0
for case in $CASES; do
  run=$((run + 1))
  if [ "$case" = ceiling ]; then
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency $BASE/health/live)
    bad=n/a
  else
    base=$BASE
    spec=${case%@plain}
    [ "$spec" != "$case" ] && base=http://127.0.0.1:$((PORT + 1))
    kind=${spec%%:*}
    slots=${spec#*:}
    [ "$slots" = "$spec" ] && slots=auto
    code="ALLWIN-${kind^^}-$slots-$run"
    flash=false; [ "$kind" = flash ] && flash=true
    extra=""; [ "$slots" != auto ] && extra=",\"counterSlots\":$slots"
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    curl -sf -XPOST $BASE/vouchers -d "{\"code\":\"$code\",\"discountAmount\":1,\"totalLimit\":1000000000,
      \"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\",
      \"flashSale\":$flash$extra}" >/dev/null
    [ "$flash" = true ] && curl -sf -XPOST $BASE/vouchers/$code/warmup >/dev/null
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
      -s loadtest/wrk/all-winners.lua "$base" -- "$code")
    bad=$(sed -n 's/^not 201: \([0-9]*\) of.*/\1/p' <<<"$out")
    used=$(curl -sf $BASE/vouchers/$code | sed -n 's/.*"usedCount":\([0-9]*\).*/\1/p')
    case="$case (K=$(curl -sf $BASE/vouchers/$code | sed -n 's/.*"counterSlots":\([0-9]*\).*/\1/p'), $used held)"
  fi
  rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")
  p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
  p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
  printf '| %s | %.0f | %s | %s | %s |\n' "$case" "$rps" "$p50" "$p99" "$bad"
done
