#!/usr/bin/env bash
# Campaigns under load, in one run with wrk: how fast `POST /campaigns` generates and stores
# codes, then reserves where every request takes a different code of a campaign, beside the
# `/health/live` ceiling and all-winners reserves on one standard voucher (the same request
# without a campaign). Cases:
#
#   - codes N: one `POST /campaigns` generating N codes (timed end to end, codes/s), standard
#     and flash-sale (whose POST also loads the campaign's gate);
#   - campaign: a campaign of CODES codes, no total and no budget: while codes last, every
#     request wins;
#   - campaign+budget: the same with a budget covering BUDGET_USES discounts: exactly that many
#     must win, whatever the concurrency (checked against the campaign's `usedCount` and
#     `budgetUsed`);
#   - flash, flash+budget: the same two with flash-sale campaigns (the campaign's gate decides,
#     mode A).
#
#   ./loadtest/wrk/campaign.sh                      # 10 s per case, 64 connections, 100,000 codes
#   GENERATE="100000 1000000" CODES=100000 BUDGET_USES=10000 ./loadtest/wrk/campaign.sh
#   PROFILE=1 GENERATE= ./loadtest/wrk/campaign.sh  # and where Postgres' time went, per function
#
# PROFILE=1 turns on `track_functions` for the benchmark's database and prints, after each
# case, the functions that took the most time (`pg_stat_user_functions`, self time per call).
#
# It builds and starts its own release server (port 3910, database fg_bench_campaign, Redis key
# prefix fg_bench_campaign:), and stops it at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
DB=${BENCH_DATABASE:-fg_bench_campaign}
. loadtest/wrk/lib.sh

GENERATE=${GENERATE-"100000 1000000"}
CODES=${CODES:-100000}
BUDGET_USES=${BUDGET_USES:-10000}
PORT=${BENCH_PORT:-3910}
BASE=http://127.0.0.1:$PORT
DISCOUNT=1000
work=$(mktemp -d)

prepare
# prepare's own trap, and the scratch folder.
trap 'kill ${servers:-} 2>/dev/null; wait ${servers:-} 2>/dev/null; rm -rf "$work"' EXIT
if [ -n "${PROFILE:-}" ]; then
  # Before the server connects: the setting holds for sessions opened after it.
  psql -h 127.0.0.1 -U postgres -d postgres -q -c "CREATE DATABASE $DB" \
    -c "ALTER DATABASE $DB SET track_functions = 'all'" >/dev/null
fi
serve "$PORT"
sql() { psql -h 127.0.0.1 -U postgres -d "$DB" "$@"; }
profile() { # after a case: its functions by self time (the counters were reset before it)
  [ -n "${PROFILE:-}" ] || return 0
  sql -c "SELECT funcname, calls, round(self_time::numeric / 1000, 2) AS self_s,
            round((self_time / greatest(calls, 1) * 1000)::numeric, 1) AS self_us_per_call
            FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT 8" >&2
}

campaign() { # COUNT [EXTRA_JSON]: creates a campaign of COUNT generated codes, prints its id
  curl -sf -XPOST -H 'content-type: application/json' "$BASE/campaigns" -d "{
    \"discountAmount\":$DISCOUNT,\"startsAt\":\"2020-01-01T00:00:00Z\",
    \"endsAt\":\"2099-01-01T00:00:00Z\",\"codes\":{\"count\":$1}${2:-}}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
field() { # URL NAME: a number field of a JSON view
  curl -sf "$1" | python3 -c "import json, sys; print(json.load(sys.stdin).get('$2'))"
}

echo "## Code generation"
# A flash campaign's POST also loads its gate (its sale is open): the walk of its codes.
printf '| codes | seconds | codes/s | flash-sale, seconds |\n|---|---|---|---|\n'
for n in $GENERATE; do
  start=$(date +%s.%N)
  campaign "$n" >/dev/null
  standard=$(date +%s.%N)
  campaign "$n" ',"flashSale":true' >/dev/null
  awk -v n="$n" -v s="$start" -v m="$standard" -v e="$(date +%s.%N)" \
    'BEGIN { printf "| %d | %.1f | %.0f | %.1f |\n", n, m - s, n / (m - s), e - m }'
done

echo
echo "## Reserves, every request a different code (${CODES} codes per campaign)"
printf '| case | req/s | p50 ms | p99 ms | Postgres µs/req | 201 | not 201 | held after |\n|---|---|---|---|---|---|---|---|\n'
wrk_case() { # NAME WRK_ARGS...: runs wrk, prints the row's first columns into $row
  local out rps p50 p99 bad before pg
  [ -z "${PROFILE:-}" ] || { sleep 1; sql -qAtc "SELECT pg_stat_reset()" >/dev/null; }
  before=$(ticks postgres)
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "${@:2}")
  rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")
  p50=$(awk '$1 == "50%" { print $2 }' <<<"$out")
  p99=$(awk '$1 == "99%" { print $2 }' <<<"$out")
  bad=$(sed -n 's/^not 201: \([0-9]*\) of.*/\1/p' <<<"$out")
  total=$(sed -n 's/^not 201: [0-9]* of \([0-9]*\).*/\1/p' <<<"$out")
  won=$(( ${total:-0} - ${bad:-0} ))
  # Postgres' CPU (every backend's ticks) over the requests wrk counted.
  pg=$(awk -v b="$before" -v a="$(ticks postgres)" -v r="$rps" -v d="${DURATION%s}" \
    'BEGIN { printf "%.0f", (a - b) * 10000 / (r * d) }')
  row=$(printf '| %s | %.0f | %s | %s | %s | %s | %s' "$1" "$rps" "$p50" "$p99" "$pg" "${total:+$won}" "${bad:-n/a}")
}

wrk_case '`GET /health/live` (ceiling)' $BASE/health/live
echo "$row | |"

code=ALLWIN-STANDARD
curl -sf -XPOST -H 'content-type: application/json' "$BASE/vouchers" -d "{\"code\":\"$code\",
  \"discountAmount\":$DISCOUNT,\"totalLimit\":1000000000,\"startsAt\":\"2020-01-01T00:00:00Z\",
  \"endsAt\":\"2099-01-01T00:00:00Z\"}" >/dev/null
wrk_case 'one standard voucher, all winners' -s loadtest/wrk/all-winners.lua "$BASE" -- "$code"
echo "$row | $(field "$BASE/vouchers/$code" usedCount) |"
profile

# wrk stops with up to one request per connection in flight: the server may have granted those
# without wrk counting their 201, so Postgres holds between the 201s counted and that many more.
held_ok() { # WON USED
  [ "$2" -ge "$1" ] && [ "$2" -le $(($1 + CONNECTIONS)) ]
}
for kind in campaign campaign+budget flash flash+budget; do
  extra=""
  case $kind in *budget) extra=",\"budgetAmount\":$((BUDGET_USES * DISCOUNT))" ;; esac
  case $kind in flash*) extra="$extra,\"flashSale\":true" ;; esac
  id=$(campaign "$CODES" "$extra")
  curl -sf -H 'accept: text/csv' "$BASE/campaigns/$id/codes" >"$work/codes.csv"
  wrk_case "$kind" -s loadtest/wrk/campaign-codes.lua "$BASE" -- "$work/codes.csv" "$THREADS"
  # The requests in flight when wrk stopped land first; then one view for both counters.
  sleep 1
  read -r used spent < <(curl -sf "$BASE/campaigns/$id" |
    python3 -c 'import json, sys; v = json.load(sys.stdin); print(v["usedCount"], v.get("budgetUsed"))')
  if [ "${kind#*+}" = budget ]; then
    # Exactly the budget's uses, when the offered requests outnumbered them.
    held_ok "$won" "$used" && [ "$spent" -eq $((used * DISCOUNT)) ] &&
      { [ "$total" -lt "$BUDGET_USES" ] || [ "$used" -eq "$BUDGET_USES" ]; } || {
      echo "campaign $id: $won told 201, $used held, $spent spent" >&2; exit 1; }
    echo "$row | $used (budget for $BUDGET_USES, $spent spent) |"
  else
    held_ok "$won" "$used" || { echo "campaign $id: $won told 201, $used held" >&2; exit 1; }
    echo "$row | $used |"
  fi
  profile
done
