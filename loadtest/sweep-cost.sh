#!/usr/bin/env bash
# What one sweep costs Redis for a flash voucher with a long history: the longest single Redis
# call of a sweep (SLOWLOG, every call logged) with $ORDERS orders in the voucher's gate, for
#   1. a sweep that finds the gate equal to Postgres (what every sweep of a live sale does),
#   2. a sweep that finds the gate stricter than Postgres and walks the orders (a fault),
# and, on the same data, the reconciler's former read (one script: HGETALL of the whole
# `orders` hash, kept below as it was) for comparison.
#
#   ./loadtest/sweep-cost.sh              # 100,000 orders
#   ORDERS=1000000 ./loadtest/sweep-cost.sh
#
# It builds and starts its own release server (port 3911, database fg_bench_sweep, no sweeper
# of its own), runs `flashgate sweep` against the same database and Redis, and stops it at the
# end. SLOWLOG's threshold is set to 0 for the measurement and put back after.
set -euo pipefail
cd "$(dirname "$0")/.."
. loadtest/wrk/lib.sh

ORDERS=${ORDERS:-100000}
PORT=${BENCH_PORT:-3911}
DB=${BENCH_DATABASE:-fg_bench_sweep}
BASE=http://127.0.0.1:$PORT
CODE=HISTORY
ORDERS_KEY="$DB:voucher:{$CODE}:orders"
REMAINING_KEY="$DB:voucher:{$CODE}:remaining"

prepare
serve "$PORT"
redis-cli --scan --pattern "$DB:*" | xargs -r redis-cli unlink >/dev/null

curl -sf -XPOST -H "content-type: application/json" $BASE/vouchers -d "{\"code\":\"$CODE\",
  \"discountAmount\":100,\"totalLimit\":$((ORDERS * 2)),\"flashSale\":true,
  \"startsAt\":\"2020-01-01T00:00:00Z\",\"endsAt\":\"2099-01-01T00:00:00Z\"}" >/dev/null
# The history: $ORDERS reservations held in Postgres (with the counters fg_merge would have
# left) and in the gate, written directly rather than through the API.
PGOPTIONS='-c statement_timeout=0' psql -h 127.0.0.1 -U postgres -d $DB -q -v ON_ERROR_STOP=1 <<SQL
INSERT INTO redemption (voucher_code, order_id, customer_id, status, order_amount,
                        discount_amount, reserved_at, expires_at, slot)
SELECT '$CODE', 'order-' || i, i, 1, 1000, 100, now(), now() + interval '1 day',
       i % v.counter_slots
  FROM generate_series(1, $ORDERS) AS i
 CROSS JOIN (SELECT counter_slots FROM voucher WHERE code = '$CODE') v;
INSERT INTO voucher_customer SELECT '$CODE', i, 1 FROM generate_series(1, $ORDERS) AS i;
UPDATE voucher_slot vs SET used = c.used
  FROM (SELECT slot, count(*) AS used FROM redemption WHERE voucher_code = '$CODE' GROUP BY slot) c
 WHERE vs.voucher_code = '$CODE' AND vs.slot = c.slot;
ANALYZE;
SQL
# The server loaded the gate when the voucher was created (its sale is open), before the history
# was written: the warm-up below does nothing then, so `remaining` is set to what Postgres leaves
# (limit - held), and the orders' entries are written as the reserves would have left them.
sweep() {
  env DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB REDIS_KEY_PREFIX=$DB: RUST_LOG=error \
    "$(target_dir)/release/flashgate" sweep
}
warm() {
  env DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB REDIS_KEY_PREFIX=$DB: RUST_LOG=error \
    "$(target_dir)/release/flashgate" warmup "$CODE" >/dev/null
}
warm
redis-cli set "$REMAINING_KEY" "$ORDERS" >/dev/null
redis-cli eval "
  for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
    redis.call('HSET', KEYS[1], 'order-' .. i, 'A|' .. i .. '|1|86400001|100|1000')
  end" 1 "$ORDERS_KEY" 1 "$ORDERS" >/dev/null
echo "gate: $(redis-cli hlen "$ORDERS_KEY") order entries, remaining $(redis-cli get "$REMAINING_KEY")"

threshold=$(redis-cli config get slowlog-log-slower-than | tail -1)
maxlen=$(redis-cli config get slowlog-max-len | tail -1)
trap 'redis-cli config set slowlog-log-slower-than "$threshold" >/dev/null;
      redis-cli config set slowlog-max-len "$maxlen" >/dev/null; kill ${servers:-} 2>/dev/null' EXIT
redis-cli config set slowlog-max-len 100000 >/dev/null

# measure NAME COMMAND...: runs it with every Redis call logged, then prints how many calls
# there were, the 99th percentile and the longest of their durations in Redis (µs; on a small
# machine the longest is often a call the OS preempted), and the wall time.
measure() {
  local name=$1
  shift
  redis-cli config set slowlog-log-slower-than 0 >/dev/null
  redis-cli slowlog reset >/dev/null
  local started=$(date +%s%N)
  "$@" >/tmp/$DB.out
  local took=$((($(date +%s%N) - started) / 1000000))
  redis-cli config set slowlog-log-slower-than "$threshold" >/dev/null
  # SLOWLOG GET: id, timestamp, duration (µs), arguments, ...; only calls on this voucher count.
  redis-cli --json slowlog get 100000 | python3 -c "
import json, sys
calls = [e for e in json.load(sys.stdin) if any('{$CODE}' in str(a) for a in e[3])]
longest = max(calls, key=lambda e: e[2])
took = sorted(e[2] for e in calls)
p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
print('| $name | %d | %d | %d | %s | %d |' % (len(calls), p99, longest[2], ' '.join(' '.join(str(a).split()) for a in longest[3])[:40], $took))"
}

printf '| case | Redis calls | p99 call µs | longest call µs | longest call | wall ms |\n|---|---|---|---|---|---|\n'
measure "sweep, gate equal to Postgres" sweep
grep -q '"driftFound":0' /tmp/$DB.out || { echo "expected no drift: $(cat /tmp/$DB.out)" >&2; exit 1; }
# The reconciler's former read: every entry of the hash, in one script.
measure "former read (HGETALL of orders, one script)" redis-cli eval "
  local out = {redis.call('GET', KEYS[1]) or ''}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    if string.sub(all[i + 1], 1, 1) == 'A' then
      out[#out + 1] = all[i]
    end
  end
  return #out" 2 "$REMAINING_KEY" "$ORDERS_KEY"
# A fault: one use fewer in the gate than Postgres says, so the sweep walks the orders.
redis-cli decr "$REMAINING_KEY" >/dev/null
measure "sweep, gate stricter (walks the orders)" sweep
grep -q '"driftRepaired":1' /tmp/$DB.out || { echo "expected a repair: $(cat /tmp/$DB.out)" >&2; exit 1; }
measure "sweep after the repair" sweep
grep -q '"driftFound":0' /tmp/$DB.out || { echo "expected no drift: $(cat /tmp/$DB.out)" >&2; exit 1; }
