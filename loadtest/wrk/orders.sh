#!/usr/bin/env bash
# An order of two codes beside one code, with wrk, in one run: the `/health/live` ceiling; all
# winners reserving one standard code (`one`), an order of two standard codes (`two`), one flash
# code (`flash-one`) and an order of a flash code and a standard one (`flash-two`). Each case
# runs in turns (A B B A over the cases) on codes whose limits never run out, every request a
# new customer and orderId; each turn says the Postgres and Redis CPU per request (their
# processes' ticks).
#
#   ./loadtest/wrk/orders.sh
#   DURATION=5s CONNECTIONS=64 CASES="ceiling one two" ./loadtest/wrk/orders.sh
#
# It builds and starts its own release server (port 3970, database fg_bench_orders, Redis key
# prefix fg_bench_orders:), and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. loadtest/wrk/lib.sh
DB=fg_bench_orders
PORT=3970
CASES=${CASES:-"ceiling one two flash-one flash-two"}
prepare
serve "$PORT"
BASE=http://127.0.0.1:$PORT
run=$(date +%s)
voucher() { # CODE FLASH
  curl -sf -XPOST -H 'content-type: application/json' "$BASE/vouchers" -d "{\"code\":\"$1\",
    \"discountAmount\":1000,\"totalLimit\":1000000000,\"perUserLimit\":1000000,\"flashSale\":$2,
    \"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" >/dev/null
  [ "$2" = true ] && curl -sf -XPOST "$BASE/vouchers/$1/warmup" >/dev/null
  return 0
}
measure() { # TURN CASE
  local out before redis_before codes
  local a=A$run$1$RANDOM b=B$run$1$RANDOM
  case $2 in
    one) voucher "$a" false; codes="$a" ;;
    two) voucher "$a" false; voucher "$b" false; codes="$a $b" ;;
    flash-one) voucher "$a" true; codes="$a" ;;
    flash-two) voucher "$a" true; voucher "$b" false; codes="$a $b" ;;
  esac
  before=$(ticks postgres) redis_before=$(ticks redis-server)
  if [ "$2" = ceiling ]; then
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$BASE/health/live")
  else
    # shellcheck disable=SC2086
    out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency -s loadtest/wrk/all-winners.lua "$BASE" -- $codes)
  fi
  local bad
  bad=$(sed -n 's/^not 201: \([0-9]*\) of.*/\1/p' <<<"$out")
  echo "$2 $(awk '/Requests\/sec/ { r = $2 } /^ *50%/ { m = $2 } /^ *99%/ { p = $2 } END { print r, m, p }' <<<"$out") \
${bad:-n/a} $before $(ticks postgres) $redis_before $(ticks redis-server)" |
    awk '{ printf "%s %s %s %s %s %.1f %.1f\n", $1, $2, $3, $4, $5, ($7 - $6) * 10000 / $2 / '"${DURATION%s}"', ($9 - $8) * 10000 / $2 / '"${DURATION%s}"' }'
}
results=$(mktemp)
for turn in 1 2 2 1; do
  for case in $CASES; do
    measure "$turn" "$case" | tee -a "$results"
  done
done
echo
echo "| case | req/s | / ceiling | p50 | p99 | not 201 | pg µs/req | Redis µs/req |"
echo "|---|---|---|---|---|---|---|---|"
awk '{ n[$1]++; r[$1] += $2; m[$1] = m[$1] " " $3; p[$1] = p[$1] " " $4; b[$1] = b[$1] " " $5; g[$1] += $6; d[$1] += $7
       if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
  END { c = r["ceiling"] / n["ceiling"]
        for (i = 1; i <= k; i++) { x = order[i]
          printf "| %s | %.0f | %.2f | %s | %s | %s | %.1f | %.1f |\n", x, r[x]/n[x], (c > 0 ? r[x]/n[x]/c : 0), m[x], p[x], b[x], g[x]/n[x], d[x]/n[x] } }' "$results"
rm -f "$results"
