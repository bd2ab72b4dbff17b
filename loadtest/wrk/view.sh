#!/usr/bin/env bash
# What `GET /vouchers/{code}` costs as a voucher's history grows: wrk on the `/health/live`
# ceiling, then on the view of a voucher with no redemptions and of one with $ROWS of them (a
# third each reserved, confirmed and released), side by side in one run. Then, with pgbench,
# the view's query as it was before the counters (three count(*) over the voucher's
# redemptions) against the one it is now, on the same two vouchers.
#
#   ./loadtest/wrk/view.sh                # 200,000 redemptions, 10 s per case, 64 connections
#   ROWS=1000000 DURATION=5s ./loadtest/wrk/view.sh
#
# It builds and starts its own release server (port 3910, database fg_bench_view) and stops it
# at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. loadtest/wrk/lib.sh

ROWS=${ROWS:-200000}
PORT=${BENCH_PORT:-3910}
DB=${BENCH_DATABASE:-fg_bench_view}
BASE=http://127.0.0.1:$PORT

prepare
serve "$PORT"

for code in EMPTY FULL; do
  curl -sf -XPOST -H "content-type: application/json" $BASE/vouchers -d "{\"code\":\"$code\",
    \"discountAmount\":100,\"totalLimit\":$((ROWS * 2)),\"startsAt\":\"2020-01-01T00:00:00Z\",
    \"endsAt\":\"2099-01-01T00:00:00Z\"}" >/dev/null
done
# The history, written in one statement rather than through the API (which would take minutes),
# with the counters fg_merge would have left. The migrator's own statement timeout is lifted.
PGOPTIONS='-c statement_timeout=0' psql -h 127.0.0.1 -U postgres -d $DB -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                        discount_amount, reserved_at, expires_at, confirmed_at, released_at,
                        release_reason, slot)
SELECT 'FULL', 'order-' || i, i, st, 1000, 100, now(), now() + interval '1 day',
       CASE WHEN st = 2 THEN now() END, CASE WHEN st = 3 THEN now() END,
       CASE WHEN st = 3 THEN 'CANCELLED' END, i % v.counter_slots
  FROM generate_series(1, $ROWS) AS i
 CROSS JOIN LATERAL (SELECT (i % 3 + 1)::smallint AS st) s
 CROSS JOIN (SELECT counter_slots FROM voucher WHERE code = 'FULL') v;
UPDATE voucher_slot vs SET used = c.used, confirmed = c.confirmed
  FROM (SELECT slot, count(*) FILTER (WHERE status IN (1, 2)) AS used,
               count(*) FILTER (WHERE status = 2) AS confirmed
          FROM redemption WHERE voucher_code = 'FULL' GROUP BY slot) c
 WHERE vs.voucher_code = 'FULL' AND vs.slot = c.slot;
ANALYZE;
SQL

printf '| case | req/s | p50 ms | p99 ms |\n|---|---|---|---|\n'
declare -A rate
for case in ceiling EMPTY FULL; do
  url=$BASE/vouchers/$case
  [ "$case" = ceiling ] && url=$BASE/health/live
  out=$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" --latency "$url")
  rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' <<<"$out")
  rate[$case]=$rps
  printf '| %s | %.0f | %s | %s |\n' "$case" "$rps" "$(awk '$1 == "50%" { print $2 }' <<<"$out")" \
    "$(awk '$1 == "99%" { print $2 }' <<<"$out")"
done
awk -v e="${rate[EMPTY]}" -v f="${rate[FULL]}" -v n="$ROWS" \
  'BEGIN { printf "view of EMPTY / view of FULL (%d redemptions): %.2f\n", n, e / f }'

# The view's query as it was before the counters (three count(*) over the voucher's
# redemptions) against the one the server now runs, on the same two vouchers, by pgbench: the
# old way and the new way side by side, in Postgres alone.
old="SELECT (SELECT count(*) FROM redemption r WHERE r.voucher_code = v.code AND r.status = 1),
  (SELECT count(*) FROM redemption r WHERE r.voucher_code = v.code AND r.status = 2),
  (SELECT count(*) FROM redemption r WHERE r.voucher_code = v.code AND r.release_reason = 'REVOKED')
  FROM voucher v WHERE v.code = :code;"
new="SELECT n.* FROM voucher v CROSS JOIN LATERAL (SELECT sum(s.used), sum(s.confirmed),
  sum(s.revoked) FROM voucher_slot s WHERE s.voucher_code = v.code) n WHERE v.code = :code;"
printf '| query | voucher | transactions/s |\n|---|---|---|\n'
for way in old new; do
  for code in EMPTY FULL; do
    script=$(mktemp)
    printf '%s\n' "${!way}" >"$script"
    tps=$(pgbench -h 127.0.0.1 -U postgres -n -c 8 -j 2 -T "${DURATION%s}" -D code="'$code'" \
      -f "$script" $DB 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    rm -f "$script"
    printf '| %s | %s | %.0f |\n' "$way" "$code" "$tps"
  done
done
