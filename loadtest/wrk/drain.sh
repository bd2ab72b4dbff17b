#!/usr/bin/env bash
# The mode-B consumer alone, two builds side by side: how fast each lands a backlog of
# `voucher-reserved` events on Kafka, and what CPU every process spends per event.
#
#   ./loadtest/wrk/drain.sh OLD_BINARY NEW_BINARY
#   DURATION=5s ./loadtest/wrk/drain.sh /tmp/flashgate-old target/release/flashgate
#
# In turns (A B B A): a server of the build that does not consume (`EVENTS_POLL=false`) takes
# all-winners reserves from wrk on a flash voucher for DURATION, so that every winner's event
# waits on the topic; then a second server of the same build, the consumer, starts on that topic
# and lands them. The rate counts from the first event landed to the last (the group's join is
# left out), with nothing else running; the CPU is each process's ticks over the same span. Each
# build gets a database and Redis key prefix of its own (fg_bench_drain_a, _b), each turn a topic
# of its own; the servers stop at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. loadtest/wrk/lib.sh

[ $# -eq 2 ] || { sed -n 2,14p "$0"; exit 2; }
OLD=$1 NEW=$2
need_wrk
./scripts/services.sh kafka >/dev/null
trap 'kill ${servers:-} 2>/dev/null; wait ${servers:-} 2>/dev/null' EXIT
for build in a b; do
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS fg_bench_drain_$build WITH (FORCE)" >/dev/null
done

cpu() { # the CPU ticks of the consumer (PID), Postgres, Redis and the broker
  echo "$(awk '{ print $14 + $15 }' "/proc/$1/stat") $(ticks postgres) $(ticks redis-server) $(ticks tansu)"
}

results=$(mktemp)
run=$(date +%s)
for turn in "a $OLD 3970" "b $NEW 3972" "b $NEW 3972" "a $OLD 3970"; do
  read -r name bin port <<<"$turn"
  DB=fg_bench_drain_$name
  topic=fg_bench_drain-$run-$RANDOM
  kafka=(KAFKA_BROKERS=127.0.0.1:9092 KAFKA_TOPIC="$topic" KAFKA_DLQ_TOPIC="$topic-dlq"
    KAFKA_GROUP="$topic" KAFKA_SESSION_TIMEOUT_MS=2000 EVENTS_TIMEOUT_MS=10000)
  FLASHGATE_BIN=$bin serve "$port" "${kafka[@]}" EVENTS_POLL=false
  producer=${servers##* }
  code=D$run$RANDOM
  curl -sf -XPOST -H 'content-type: application/json' "http://127.0.0.1:$port/vouchers" -d "{\"code\":\"$code\",
    \"discountAmount\":1000,\"totalLimit\":100000000,\"perUserLimit\":1000000,\"flashSale\":true,
    \"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" >/dev/null
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s loadtest/wrk/all-winners.lua "http://127.0.0.1:$port" -- "$code")
  sleep 1 # the answers wrk did not wait for
  # Every use the gate granted has its event on the topic: the view counts them (wrk only the
  # answers it waited for).
  won=$(curl -sf "http://127.0.0.1:$port/vouchers/$code" | sed -n 's/.*"usedCount":\([0-9]*\).*/\1/p')
  counted=$(( $(sed -n 's/^not 201: [0-9]* of \([0-9]*\).*/\1/p' <<<"$out") - $(sed -n 's/^not 201: \([0-9]*\) of.*/\1/p' <<<"$out") ))
  [ "$counted" -gt "$won" ] && won=$counted
  FLASHGATE_BIN=$bin serve $((port + 1)) "${kafka[@]}"
  consumer=${servers##* }
  landed=$(landed "$DB" "$code")
  for _ in $(seq 1200); do [ "$landed" -eq 0 ] || break; sleep 0.05; landed=$(landed "$DB" "$code"); done
  start=$(date +%s.%N) first=$landed before=$(cpu "$consumer")
  for _ in $(seq 6000); do [ "$landed" -lt "$won" ] || break; sleep 0.1; landed=$(landed "$DB" "$code"); done
  end=$(date +%s.%N) after=$(cpu "$consumer")
  echo "$name $landed $first $start $end $before $after" | tee -a "$results"
  kill "$producer" "$consumer"
  wait "$producer" "$consumer" 2>/dev/null || true
  servers=""
done

echo
echo "| build | events | landed alone, events/s | consumer µs/event | Postgres µs/event | Redis µs/event | broker µs/event |"
echo "|---|---|---|---|---|---|---|"
awk '{ n = $2 - $3; t = $5 - $4
       printf "| %s | %d | %.0f | %.1f | %.1f | %.1f | %.1f |\n", $1, $2, n / t,
         ($10 - $6) * 10000 / n, ($11 - $7) * 10000 / n, ($12 - $8) * 10000 / n, ($13 - $9) * 10000 / n }' "$results"
rm -f "$results"
