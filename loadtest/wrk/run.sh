#!/usr/bin/env bash
# All-winners HTTP runs with wrk, side by side in one run: the `/health/live` ceiling, then
# reserve on a voucher whose limit never runs out (every request a new customer, so every
# request should win), standard and flash. A case is `KIND[:K][+budget][@plain]`: K the counter
# slots (absent: the service's own choice, 32 for this limit); `+budget` gives the voucher a
# money budget that never runs out either (what counting the money costs); `@plain` sends it to a second server
# that writes each reserve on its own (GROUP_COMMIT_MAX=1), as before group commit; `@kafka`
# to a server in mode B on the local Kafka broker, `@fauxqs` or `@moto` to one in mode B on that
# local SQS emulator, `@kafka1` on Kafka with one record per produce batch (each started only
# when a case names it). For mode B the table adds the
# events still to land when wrk stopped and the rate the consumer landed them at. Each case
# gets a fresh voucher.
#
#   ./loadtest/wrk/run.sh                 # 10 s per case, 64 connections, 2 wrk threads
#   DURATION=5s CONNECTIONS=32 ./loadtest/wrk/run.sh
#   CASES="ceiling flash:1@plain flash" ./loadtest/wrk/run.sh
#   CASES="ceiling flash flash@kafka flash@fauxqs" ./loadtest/wrk/run.sh
#   CASES="ceiling standard standard+budget flash flash+budget" ./loadtest/wrk/run.sh
#
# It builds and starts its own release servers (ports 3900-3905, database fg_bench_http,
# Redis key prefix fg_bench_http:), and stops them at the end. Extra server settings pass
# through the environment.
set -euo pipefail
cd "$(dirname "$0")/../.."
. loadtest/wrk/lib.sh

CASES=${CASES:-"ceiling standard:1@plain standard:1 standard flash:1@plain flash:1 flash"}
PORT=${BENCH_PORT:-3900}
DB=${BENCH_DATABASE:-fg_bench_http}
BASE=http://127.0.0.1:$PORT

prepare
serve "$PORT"
serve $((PORT + 1)) GROUP_COMMIT_MAX=1
# Mode B servers. Topic and queue names are new each run: the brokers outlive it.
run_id=$DB-$(date +%s)
if [[ " $CASES " == *@kafka* ]]; then
  ./scripts/services.sh kafka >/dev/null
  kafka() { # PORT NAME [SETTING=VALUE...]
    serve "$1" KAFKA_BROKERS=127.0.0.1:9092 KAFKA_TOPIC=$2 KAFKA_DLQ_TOPIC=$2-dlq KAFKA_GROUP=$2 \
      KAFKA_SESSION_TIMEOUT_MS=2000 EVENTS_TIMEOUT_MS=10000 "${@:3}"
  }
  # @kafka: the producer's defaults, as on MSK. @kafka1: one record per produce batch, as the
  # tests and `serve.sh kafka` run on the local broker, which misreports the end offset of a
  # multi-record batch (the warm-up reads it; docs/BENCHMARKS.md, "Kafka locally").
  if [[ " $CASES " == *"@kafka "* ]]; then kafka $((PORT + 2)) "$run_id"; fi
  if [[ " $CASES " == *@kafka1* ]]; then kafka $((PORT + 5)) "$run_id-1" KAFKA_BATCH_MESSAGES=1; fi
fi
if [[ " $CASES " == *@fauxqs* ]]; then
  ./scripts/services.sh fauxqs >/dev/null
  serve $((PORT + 3)) SQS_ENDPOINT_URL=http://127.0.0.1:9325 AWS_REGION=us-east-1 EVENTS_TIMEOUT_MS=10000 \
    EVENTS_QUEUE_URL=http://sqs.us-east-1.localhost:9325/000000000000/$run_id
fi
if [[ " $CASES " == *@moto* ]]; then
  ./scripts/services.sh sqs >/dev/null
  serve $((PORT + 4)) SQS_ENDPOINT_URL=http://127.0.0.1:9324 AWS_REGION=us-east-1 EVENTS_TIMEOUT_MS=10000 \
    EVENTS_QUEUE_URL=http://127.0.0.1:9324/123456789012/$run_id
fi

printf '| case | req/s | p50 ms | p99 ms | not 201 |\n|---|---|---|---|---|\n'
run=0
for case in $CASES; do
  run=$((run + 1))
  if [ "$case" = ceiling ]; then
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency $BASE/health/live)
    bad=n/a
  else
    base=$BASE
    spec=${case%@*}
    case "${case#"$spec"}" in
      @plain) base=http://127.0.0.1:$((PORT + 1)) ;;
      @kafka) base=http://127.0.0.1:$((PORT + 2)) ;;
      @kafka1) base=http://127.0.0.1:$((PORT + 5)) ;;
      @fauxqs) base=http://127.0.0.1:$((PORT + 3)) ;;
      @moto) base=http://127.0.0.1:$((PORT + 4)) ;;
    esac
    extra=""
    if [[ $spec == *+budget ]]; then
      spec=${spec%+budget}
      extra=",\"budgetAmount\":1000000000000000"
    fi
    kind=${spec%%:*}
    slots=${spec#*:}
    [ "$slots" = "$spec" ] && slots=auto
    code="ALLWIN-${kind^^}-$slots-$run"
    flash=false; [ "$kind" = flash ] && flash=true
    [ "$slots" != auto ] && extra="$extra,\"counterSlots\":$slots"
    now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    curl -sf -XPOST -H "content-type: application/json" $BASE/vouchers -d "{\"code\":\"$code\",\"discountAmount\":1,\"totalLimit\":1000000000,
      \"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\",
      \"flashSale\":$flash$extra}" >/dev/null
    [ "$flash" = true ] && curl -sf -XPOST $BASE/vouchers/$code/warmup >/dev/null
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency \
      -s loadtest/wrk/all-winners.lua "$base" -- "$code")
    bad=$(sed -n 's/^not 201: \([0-9]*\) of.*/\1/p' <<<"$out")
    used=$(landed "$DB" "$code")
    if [[ $case == *@kafka* || $case == *@fauxqs || $case == *@moto ]]; then
      # Mode B: how many of the 201s Postgres still lacked when wrk stopped, and how long the
      # consumer took to land them all.
      won=$(( $(sed -n 's/^not 201: [0-9]* of \([0-9]*\).*/\1/p' <<<"$out") - bad ))
      left=$((won - used)); start=$(date +%s.%N)
      # What the drain costs, with wrk stopped: the consumer alone, and each process's CPU.
      cpu_before="$(ticks flashgate) $(ticks postgres) $(ticks redis-server) $(ticks tansu)"
      for _ in $(seq 1200); do
        [ "$used" -ge "$won" ] && break
        sleep 0.25
        used=$(landed "$DB" "$code")
      done
      end=$(date +%s.%N)
      cpu_after="$(ticks flashgate) $(ticks postgres) $(ticks redis-server) $(ticks tansu)"
      elapsed=$(awk -v d="${DURATION%s}" -v s="$start" -v e="$end" 'BEGIN { print d + e - s }')
      rate=$(awk -v w="$won" -v t="$elapsed" 'BEGIN { printf "%.0f", w / t }')
      case="$case: $left to land at end, $rate events/s landed"
      if [ "$left" -gt 1000 ]; then
        case="$case; after wrk, $(echo "$cpu_before $cpu_after" | awk -v n="$left" -v s="$start" -v e="$end" '{
          printf "%.0f events/s alone, CPU µs/event: server %.1f, Postgres %.1f, Redis %.1f, broker %.1f",
            n / (e - s), ($5 - $1) * 10000 / n, ($6 - $2) * 10000 / n, ($7 - $3) * 10000 / n, ($8 - $4) * 10000 / n }')"
      fi
    fi
    case="$case (K=$(curl -sf $BASE/vouchers/$code | sed -n 's/.*"counterSlots":\([0-9]*\).*/\1/p'), $used held)"
  fi
  rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")
  p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
  p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
  printf '| %s | %.0f | %s | %s | %s |\n' "$case" "$rps" "$p50" "$p99" "$bad"
done
