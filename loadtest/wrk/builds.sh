#!/usr/bin/env bash
# Two builds of `flashgate` side by side in one run, with wrk: what a change costs on the hot
# paths. For each build, in turns (A B B A, so that a drift of the machine during the run
# weighs on both alike): the `/health/live` ceiling, all-winners reserves on a flash voucher
# and on a standard one, reserves on a sold-out flash voucher, (`unknown`, only when CASES names
# it) reserves of codes that do not exist, and (`flash@kafka`, only when
# CASES names it) all-winners reserves on a flash voucher in mode B on the local Kafka broker,
# each build with a consumer of its own in its process. CASES picks some of them. Each turn
# also says the CPU Postgres and Redis spent per request (their processes' ticks); a mode-B
# turn then waits for its events to land, and says how many were left when wrk stopped, the
# consumer's rate over the turn, and its rate alone once wrk had stopped.
#
#   ./loadtest/wrk/builds.sh OLD_BINARY NEW_BINARY
#   DURATION=5s CONNECTIONS=64 ./loadtest/wrk/builds.sh /tmp/flashgate-old target/release/flashgate
#
# Build the old binary from a worktree of the older commit (`git worktree add /tmp/old REV`,
# then `cargo build --release --bin flashgate` there and copy it out). Each server gets a
# database and Redis key prefix of its own (fg_bench_builds_a, _b), and stops at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. loadtest/wrk/lib.sh

[ $# -eq 2 ] || { sed -n 2,12p "$0"; exit 2; }
OLD=$1 NEW=$2
need_wrk
./scripts/services.sh >/dev/null

trap 'kill ${servers:-} 2>/dev/null; wait ${servers:-} 2>/dev/null' EXIT
start() { # NAME BINARY PORT: lib.sh's server, on a database of its own, from BINARY
  local DB=fg_bench_builds_$1
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
  FLASHGATE_BIN=$2 serve "$3"
  curl -sf "http://127.0.0.1:$3/health" >/dev/null || { echo "server $1 did not start (/tmp/$DB.log)" >&2; exit 1; }
}
start a "$OLD" 3960
start b "$NEW" 3961
# Mode B: a server of each build on Kafka, on that build's database, with topics of its own.
if [[ " ${CASES:-} " == *" flash@kafka "* ]]; then
  ./scripts/services.sh kafka >/dev/null
  topic=fg_bench_builds-$(date +%s)
  for build in "a $OLD 3962" "b $NEW 3963"; do
    set -- $build
    DB=fg_bench_builds_$1 FLASHGATE_BIN=$2 serve "$3" KAFKA_BROKERS=127.0.0.1:9092 \
      KAFKA_TOPIC="$topic-$1" KAFKA_DLQ_TOPIC="$topic-$1-dlq" KAFKA_GROUP="$topic-$1" \
      KAFKA_SESSION_TIMEOUT_MS=2000 EVENTS_TIMEOUT_MS=10000
    curl -sf "http://127.0.0.1:$3/health" >/dev/null || { echo "mode-B server $1 did not start" >&2; exit 1; }
  done
fi

voucher() { # PORT CODE LIMIT [FLASH]
  curl -sf -XPOST -H 'content-type: application/json' "http://127.0.0.1:$1/vouchers" -d "{\"code\":\"$2\",
    \"discountAmount\":1000,\"totalLimit\":$3,\"perUserLimit\":1000000,\"flashSale\":${4:-true},
    \"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" >/dev/null
}

rate() { # wrk output -> requests/s, p99 (ms), requests
  awk '/Requests\/sec/ { r = $2 } /^ *99%/ { p = $2 } / requests in / { n = $1 } END { print r, p, n }'
}

run=$(date +%s)
measure() { # NAME PORT CASE: req/s, p99, and Postgres and Redis CPU per request (microseconds)
  local out code before redis_before
  before=$(ticks postgres) redis_before=$(ticks redis-server)
  case $3 in
    ceiling) out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:$2/health/live") ;;
    flash)
      code=W$run$1$RANDOM
      voucher "$2" "$code" 100000000
      out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s loadtest/wrk/all-winners.lua "http://127.0.0.1:$2" -- "$code")
      ;;
    standard)
      code=T$run$1$RANDOM
      voucher "$2" "$code" 100000000 false
      out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s loadtest/wrk/all-winners.lua "http://127.0.0.1:$2" -- "$code")
      ;;
    sold-out)
      code=S$run$1$RANDOM
      voucher "$2" "$code" 1
      out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s loadtest/wrk/all-winners.lua "http://127.0.0.1:$2" -- "$code")
      ;;
    unknown)
      # Codes that do not exist, from a pool of 1,000 (a bot's list): Postgres answers each once
      # per UNKNOWN_CODE_CACHE_MS in a build that keeps them.
      out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s loadtest/wrk/unknown-codes.lua "http://127.0.0.1:$2" -- "U$run$1" 1000)
      ;;
    flash@kafka)
      code=K$run$1$RANDOM
      voucher $(($2 + 2)) "$code" 100000000
      out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s loadtest/wrk/all-winners.lua "http://127.0.0.1:$(($2 + 2))" -- "$code")
      ;;
  esac
  local line
  line=$(echo "$1 $3 $(echo "$out" | rate) $before $(ticks postgres) $redis_before $(ticks redis-server)" |
    awk '{ printf "%s %s %s %s %.1f %.1f", $1, $2, $3, $4, ($7 - $6) * 10000 / $5, ($9 - $8) * 10000 / $5 }')
  if [ "$3" = flash@kafka ]; then
    line="$line $(drain "fg_bench_builds_$1" $(($2 + 2)) "$code" "$out")"
  fi
  echo "$line"
}

drain() { # DATABASE PORT CODE WRK_OUTPUT: waits for the turn's events to land; prints the
  # events left when wrk stopped, the consumer's rate over the turn, and its rate alone after
  local counted left start end landed first inflight
  first=$(landed "$1" "$3") start=$(date +%s.%N)
  # Done when the gate has no order pending: the view's inFlightCount is 0 (the consumer takes
  # an order out of it once its event landed). A build without that count is done when
  # Postgres holds every 201 wrk counted.
  counted=$(( $(sed -n 's/^not 201: [0-9]* of \([0-9]*\).*/\1/p' <<<"$4") - $(sed -n 's/^not 201: \([0-9]*\) of.*/\1/p' <<<"$4") ))
  landed=$first
  for _ in $(seq 2400); do
    inflight=$(curl -sf "http://127.0.0.1:$2/vouchers/$3" | sed -n 's/.*"inFlightCount":\([0-9]*\).*/\1/p')
    landed=$(landed "$1" "$3")
    if [ -n "$inflight" ]; then [ "$inflight" -eq 0 ] && break; else [ "$landed" -ge "$counted" ] && break; fi
    sleep 0.25
  done
  end=$(date +%s.%N) left=$((landed - first))
  awk -v w="$landed" -v l="$left" -v d="${DURATION%s}" -v s="$start" -v e="$end" \
    'BEGIN { printf "%d %.0f %.0f", l, w / (d + e - s), ((e - s) > 0 ? l / (e - s) : 0) }'
}

results=$(mktemp)
for case in ${CASES:-ceiling flash standard sold-out}; do
  for turn in "a 3960" "b 3961" "b 3961" "a 3960"; do
    # shellcheck disable=SC2086
    measure $turn "$case" | tee -a "$results"
  done
done

echo
echo "| case | old req/s | new req/s | new / old | old p99 | new p99 | old pg µs/req | new pg µs/req | old Redis µs/req | new Redis µs/req |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for case in ${CASES:-ceiling flash standard sold-out}; do
  awk -v c="$case" '$2 == c { n[$1]++; r[$1] += $3; p[$1] = p[$1] " " $4; g[$1] += $5; d[$1] += $6 }
    END { printf "| %s | %.0f | %.0f | %.3f | %s | %s | %.1f | %.1f | %.1f | %.1f |\n", c, r["a"]/n["a"], r["b"]/n["b"],
          r["b"]/r["a"], p["a"], p["b"], g["a"]/n["a"], g["b"]/n["b"], d["a"]/n["a"], d["b"]/n["b"] }' "$results"
done
if grep -q " flash@kafka " "$results"; then
  echo
  echo "| mode B, Kafka | old events left at wrk's stop | new events left | old consumer events/s over the turn | new | old events/s alone after wrk | new |"
  echo "|---|---|---|---|---|---|---|"
  awk '$2 == "flash@kafka" { n[$1]++; l[$1] = l[$1] " " $7; r[$1] += $8; a[$1] += $9 }
    END { printf "| flash@kafka | %s | %s | %.0f | %.0f | %.0f | %.0f |\n", l["a"], l["b"], r["a"]/n["a"], r["b"]/n["b"],
          a["a"]/n["a"], a["b"]/n["b"] }' "$results"
fi
rm -f "$results"
