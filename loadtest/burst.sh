#!/usr/bin/env bash
# The seed's burst against `flashgate serve`, as a user measures it: the simulator in a process
# of its own (`--base-url`), one flash voucher of 1,000 uses, RATE reserves a second (15,000) for
# 5 s from 250,000 customers. RUNS runs (3) of each of MODES ("a kafka": mode A, then mode B on
# the local Kafka broker), each on a fresh server and database. Each run prints the simulator's
# verdict, then the first second's profile:
#
# - the cores each process spent per 100 ms (the server, the simulator, every Postgres process,
#   redis-server), from their CPU ticks sampled every 100 ms;
# - the group-commit batches of mode A's winners (how many, their mean size, the mean time of a
#   batch's write) and the produces of mode B, from the server's `/metrics`;
# - Postgres' and Redis' CPU per winner over the whole run (each process's ticks over the run,
#   divided by the 1,000 winners: an upper bound, since they also serve the losers and the
#   follow-up).
#
#   ./loadtest/burst.sh
#   RUNS=1 MODES=a ./loadtest/burst.sh
#   FLASHGATE_BIN=/tmp/old/flashgate FLASH_SALE_BIN=/tmp/old/flash-sale ./loadtest/burst.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DB=fg_bench_burst
. loadtest/wrk/lib.sh

RATE=${RATE:-15000} RUNS=${RUNS:-3} MODES=${MODES:-a kafka}
./scripts/services.sh >/dev/null
[[ " $MODES " == *" kafka "* ]] && ./scripts/services.sh kafka >/dev/null
if [ -z "${FLASHGATE_BIN:-}" ] || [ -z "${FLASH_SALE_BIN:-}" ]; then
  cargo build --release --locked --bin flashgate --bin flash-sale >/dev/null
fi
FLASHGATE_BIN=${FLASHGATE_BIN:-$(target_dir)/release/flashgate}
FLASH_SALE_BIN=${FLASH_SALE_BIN:-$(target_dir)/release/flash-sale}
trap 'kill ${servers:-} ${sampler:-} 2>/dev/null; wait ${servers:-} 2>/dev/null' EXIT
PORT=3970

metric() { # METRICS_TEXT NAME LABEL_MATCH: the sum of the samples of NAME whose labels match
  awk -v n="$2" -v m="$3" 'index($1, n) == 1 && index($1, m) > 0 { s += $2 } END { printf "%.6f", s }' <<<"$1"
}

for mode in $MODES; do
  for run in $(seq "$RUNS"); do
    psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
    extra=()
    if [ "$mode" = kafka ]; then
      topic=fg_bench_burst-$(date +%s)
      extra=(KAFKA_BROKERS=127.0.0.1:9092 KAFKA_TOPIC=$topic KAFKA_DLQ_TOPIC=$topic-dlq
        KAFKA_GROUP=$topic KAFKA_SESSION_TIMEOUT_MS=2000 EVENTS_TIMEOUT_MS=10000)
    fi
    servers=''
    serve $PORT "${extra[@]}"
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "the server did not start (/tmp/$DB.log)" >&2; exit 1; }
    before=$(curl -sf "http://127.0.0.1:$PORT/metrics")
    samples=$(mktemp)
    ( while :; do
        echo "$(date +%s.%N) $(ticks flashgate) $(ticks flash-sale) $(ticks postgres) $(ticks redis-server)"
        sleep 0.1
      done >"$samples" ) &
    sampler=$!
    pg0=$(ticks postgres) redis0=$(ticks redis-server)
    start=$(date +%s.%N)
    out=$("$FLASH_SALE_BIN" --base-url "http://127.0.0.1:$PORT" --rate "$RATE" --duration 5 \
      --customers 250000 --out "target/flash-sale/burst-$mode-$run" 2>&1) || true
    pg1=$(ticks postgres) redis1=$(ticks redis-server)
    kill $sampler 2>/dev/null; wait $sampler 2>/dev/null || true
    after=$(curl -sf "http://127.0.0.1:$PORT/metrics")
    kill $servers 2>/dev/null; wait $servers 2>/dev/null || true
    servers=''
    echo "=== mode $mode, run $run: $(grep -E "^offered" <<<"$out")"
    grep -E "^\| (RESERVED|all) |the seed's verdict|PROBLEM" <<<"$out" || echo "$out" | tail -5
    # The first second, per 100 ms from the first sample after the simulator started.
    awk -v s="$start" 'NR == 1 || $1 < s { p = $0; next }
      n < 10 { split(p, a); d = $1 - a[1];
        printf "  %4.1f-%4.1f s: server %.2f, simulator %.2f, Postgres %.2f, Redis %.2f cores\n",
          n / 10, (n + 1) / 10, ($2 - a[2]) / 100 / d, ($3 - a[3]) / 100 / d, ($4 - a[4]) / 100 / d, ($5 - a[5]) / 100 / d;
        n++; p = $0 }' "$samples"
    rm -f "$samples"
    batches=$(($(printf '%.0f' "$(metric "$after" flashgate_group_commit_batch_size_count 'writer="flash"')") - $(printf '%.0f' "$(metric "$before" flashgate_group_commit_batch_size_count 'writer="flash"')")))
    winners=$(awk -v a="$(metric "$after" flashgate_group_commit_batch_size_sum 'writer="flash"')" -v b="$(metric "$before" flashgate_group_commit_batch_size_sum 'writer="flash"')" 'BEGIN { printf "%.0f", a - b }')
    calls=$(grep -o 'flashgate_dependency_duration_seconds_count{dependency="postgres",call="[a-z_]*"' <<<"$after" | sed 's/.*call="//; s/"$//' | sort -u)
    for call in $calls; do
      c=$(awk -v a="$(metric "$after" flashgate_dependency_duration_seconds_count "call=\"$call\"")" -v b="$(metric "$before" flashgate_dependency_duration_seconds_count "call=\"$call\"")" 'BEGIN { printf "%.0f", a - b }')
      t=$(awk -v a="$(metric "$after" flashgate_dependency_duration_seconds_sum "call=\"$call\"")" -v b="$(metric "$before" flashgate_dependency_duration_seconds_sum "call=\"$call\"")" 'BEGIN { printf "%.6f", a - b }')
      [ "$c" -gt 0 ] && awk -v c="$c" -v t="$t" -v n="$call" 'BEGIN { printf "  Postgres %s: %d calls, mean %.1f ms\n", n, c, t * 1000 / c }'
    done
    [ "$batches" -gt 0 ] && echo "  group commit, flash winners: $batches batches, mean $((winners / batches)) winners a batch"
    awk -v p=$((pg1 - pg0)) -v r=$((redis1 - redis0)) \
      'BEGIN { printf "  over the run, per winner of 1,000: Postgres %.0f µs, Redis %.0f µs of CPU\n", p * 10, r * 10 }'
  done
done
